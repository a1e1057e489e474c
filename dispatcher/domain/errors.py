"""Validation errors that name the field at fault."""

from __future__ import annotations


class InvalidInput(ValueError):
    """Bad input: `code` is machine-readable, `field` a JSON path, `status` the HTTP status."""

    def __init__(self, field: str, message: str, code: str = "invalid", status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.status = status

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "message": self.message}
