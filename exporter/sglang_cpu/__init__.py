"""Install and run the real SGLang on a CPU-only machine (for demos and end-to-end tests)."""
