"""The scripted model behind an OpenAI-compatible chat completions endpoint."""

import hmac
import os
import time

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from runs.untrusted import UntrustedInputError, parse_json_bytes

from ..openai_wire import ChatRequestError, parse_request
from ..scripted_llm import complete

MODEL_ID = "scripted"


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
        body = parse_json_bytes(request.body or b"",
                                max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    except UntrustedInputError:
        error = ChatRequestError("We could not parse the JSON body of your request.")
        return JsonResponse(error.as_body(), status=400)
    try:
        chat = parse_request(body)
    except ChatRequestError as error:
        return JsonResponse(error.as_body(), status=400)
    return JsonResponse(complete(chat, created=int(time.time())))


@require_GET
def models(request):
    if (denied := _auth_error(request)) is not None:
        return denied
    model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "agentops-sandbox"}
    return JsonResponse({"object": "list", "data": [model]})
