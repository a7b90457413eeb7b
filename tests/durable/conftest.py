import pytest

# The contract is not a test module, but its plain asserts should explain themselves.
pytest.register_assert_rewrite("tests.durable.contract")
