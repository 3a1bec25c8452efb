"""The rows an append hands to a log store before the log places them (`Row`)."""

from __future__ import annotations


class Row:
    """One event about to be written, before its position, time and hash are known."""

    __slots__ = ("data", "delivery_id", "stream", "type", "type_version", "version")

    def __init__(
        self,
        stream: str,
        version: int | None,
        type_: str,
        type_version: int,
        delivery_id: str | None,
        data: str | bytes,
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type_
        self.type_version = type_version
        self.delivery_id = delivery_id
        self.data = data
