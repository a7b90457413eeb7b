"""The scripted model behind an OpenAI-compatible chat completions endpoint.

``stream: true`` answers with server-sent events, a chunk per token, each after
``token_ms`` milliseconds (query parameter, ``X-Sandbox-Token-Ms`` header or
``AGENTOPS_SANDBOX_LLM_TOKEN_MS``; 0 by default) so that streaming is visible.
Every request is counted under its Idempotency-Key (``LlmCall``).
"""

import asyncio
import hmac
import json
import os
import time

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from runs.web.untrusted import UntrustedInputError, parse_json_bytes

from ..errors import SandboxError
from ..http import int_param
from ..models import LlmCall
from ..openai_wire import ChatRequestError, parse_request
from ..scripted_llm import complete, stream_chunks

MODEL_ID = "scripted"
MAX_TOKEN_MS = 5000


def _auth_error(request) -> JsonResponse | None:
    """401 unless the Bearer token matches AGENTOPS_SANDBOX_LLM_KEY (when that is set)."""
    expected = os.environ.get("AGENTOPS_SANDBOX_LLM_KEY", "")
    if not expected:
        return None
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), expected):
        return None
    message = "You didn't provide an API key." if not token else "Incorrect API key provided."
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    return JsonResponse(body, status=401)


@csrf_exempt  # an API for machines
@require_POST
def chat_completions(request):
    if (denied := _auth_error(request)) is not None:
        return denied
    try:
        token_ms = int_param(request, "token_ms", 0, low=0, high=MAX_TOKEN_MS,
                             header="X-Sandbox-Token-Ms", env="AGENTOPS_SANDBOX_LLM_TOKEN_MS")
    except SandboxError as error:
        return JsonResponse(ChatRequestError(error.message, "token_ms").as_body(), status=400)
    try:
        body = parse_json_bytes(request.body or b"",
                                max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    except UntrustedInputError:
        error = ChatRequestError("We could not parse the JSON body of your request.")
        return JsonResponse(error.as_body(), status=400)
    try:
        chat = parse_request(body)
    except ChatRequestError as error:
        return JsonResponse(error.as_body(), status=400)
    call = LlmCall.objects.create(key=request.headers.get("Idempotency-Key", "")[:255],
                                  streamed=chat.stream)
    completion = complete(chat, created=int(time.time()))
    if not chat.stream:
        LlmCall.objects.filter(pk=call.pk).update(completed_at=timezone.now())
        return JsonResponse(completion)
    chunks = stream_chunks(completion, include_usage=chat.include_usage)
    response = StreamingHttpResponse(_events(chunks, token_ms / 1000, call.pk),
                                     content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the stream back
    return response


async def _events(chunks: list[dict], pause: float, call_id: int):
    """The SSE body. An async iterator: Daphne sends each event as it is yielded (a
    sync one would be read to its end before the first byte went out)."""
    for chunk in chunks:
        if pause:
            await asyncio.sleep(pause)
        yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
    # Noted once every chunk went out and before [DONE]: a client that hangs up as soon
    # as it reads [DONE] has this task cancelled, and a loaded machine once lost the
    # note that way.
    await sync_to_async(_completed)(call_id)
    yield b"data: [DONE]\n\n"


def _completed(call_id: int) -> None:
    LlmCall.objects.filter(pk=call_id).update(completed_at=timezone.now())


@require_GET
def models(request):
    if (denied := _auth_error(request)) is not None:
        return denied
    model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "agentops-sandbox"}
    return JsonResponse({"object": "list", "data": [model]})
