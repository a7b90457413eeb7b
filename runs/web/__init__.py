"""The user pages: views, forms, URLs and the guards on untrusted input."""
