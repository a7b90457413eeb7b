.PHONY: test chaos serve

test:
	bin/test

chaos:
	.venv/bin/python -m tests.chaos

serve:
	bin/serve
