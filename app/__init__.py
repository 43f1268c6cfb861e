"""ideabench's HTTP face: a FastAPI app built by ``app.main.create_app``.

Never imports torch, ``workers`` or ``tracks`` (enforced by import-linter).
"""
