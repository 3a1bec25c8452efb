"""Personal input fields: sealed before they are appended, opened for the job, forgotten.

A binding (`[[bindings]] personal = [...]`) or a submit (`personal=[...]`) marks dotted paths
of an object input payload as personal; the union applies. `PersonalData.seal` replaces each
marked value by a marker (`rota.domain.personal`) holding it sealed (AES-256-GCM) under the
Work's own key, which it first creates and commits in the store's key table (never in the
log): the log, its exports and projections hold only ciphertext. The input key derived from
such a payload hashes the sealed form (deterministic under the Work's key, so a retried
submit derives the same key, and nobody without the key can test a guess against it).

At launch, `open_inputs` gives the job the plaintext while the key exists. `forget`
destroys the key and records `core.work.forgotten` (once; the Work, who, why, never what):
every sealed field of the Work is then unreadable everywhere, and an attempt launched later
fails with `input_forgotten` instead of running on placeholders. Reads (events, history,
export) never open anything: they show the markers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from rota.application.errors import PortCode
from rota.application.ports import PersonalCipher, PersonalKeys, RecordedEvent
from rota.application.transactions import Transactions
from rota.domain.emit import Emit
from rota.domain.errors import DomainCode, InvalidCommand, Refusal, RotaError
from rota.domain.events.work import WorkForgotten, forgotten_identity
from rota.domain.failures import FailureCode
from rota.domain.personal import check_paths, has_markers, open_fields, seal_fields, unsealed
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput

CONTEXT = b"rota-personal/v1\x00"
MAX_NOTE = 1000  # characters of `by` and of `reason`
CipherFactory = Callable[[], PersonalCipher]


class Unreadable(Exception):
    """A sealed value of an attempt's input cannot be given to it: `code` says why (a
    `FailureCode`: the key was destroyed, or the token does not open)."""

    def __init__(self, code: FailureCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def result(self) -> Result:
        """The attempt's permanent failure (nothing was launched)."""
        return Result(
            outcome="failed", error_code=self.code, error_message=str(self), permanent=True
        )


def context(work_id: str, path: str) -> bytes:
    """The associated data of a sealed field: it opens only as this field of this Work
    (never the position: a value is sealed before the log gives it one)."""
    return CONTEXT + work_id.encode() + b"\x00" + path.encode()


class PersonalData:
    """Sealing, opening and forgetting over one key table and one cipher."""

    def __init__(
        self,
        keys: PersonalKeys,
        cipher: CipherFactory,
        tx: Transactions,
        binding_paths: Callable[[str], tuple[str, ...]] = lambda binding: (),
    ) -> None:
        self.keys = keys
        self._cipher_factory = cipher
        self._cipher: PersonalCipher | None = None
        self.tx = tx
        self.store = tx.store
        self.binding_paths = binding_paths

    @property
    def cipher(self) -> PersonalCipher:
        if self._cipher is None:
            self._cipher = self._cipher_factory()  # (raises `personal_unavailable`)
        return self._cipher

    # -- sealing -------------------------------------------------------------------------

    def seal(self, command: SubmitWork) -> SubmitWork:
        """`command` with every marked field of its inputs sealed and the marks cleared
        (the command itself when nothing is marked). The Work's key is committed first."""
        marked = self.binding_paths(command.binding)
        if not marked and not any(given.personal for given in command.inputs):
            return command
        if command.debounce is not None or command.unique is not None:
            # (its input may go to another Work, sealed under the wrong Work's key)
            raise InvalidCommand(
                f"Work {command.work_id!r}: personal input fields cannot be used with "
                "debounce or unique (a merged input would be sealed for another Work)",
                code=DomainCode.INVALID_PERSONAL,
            )
        inputs = tuple(self.seal_input(command.work_id, given, marked) for given in command.inputs)
        return msgspec.structs.replace(command, inputs=inputs)

    def seal_input(self, work_id: str, given: WorkInput, marked: tuple[str, ...] = ()) -> WorkInput:
        """One input with its marked fields (`given.personal` and `marked`) sealed."""
        paths = check_paths([*marked, *check_paths(given.personal)])
        if not paths:
            return given
        # A non-object payload is refused before a key is made for it; one without any of
        # the marked fields needs no key.
        seal_fields(given.payload, paths, lambda path, value: "")
        if not unsealed(given.payload, paths):
            return WorkInput(given.payload, given.key, given.correlation_key)
        forgotten = Refusal(
            f"Work {work_id!r} was forgotten (rota forget): it accepts no personal input",
            code=PortCode.PERSONAL_FORGOTTEN,
        )
        if self.store.find_delivery(forgotten_identity(work_id)) is not None:
            raise forgotten
        cipher = self.cipher
        key = self.keys.create(work_id)
        if key is None:  # (destroyed by a forget racing this submit: never a new key)
            raise forgotten

        def seal(path: str, value: Any) -> str:
            return cipher.seal(key, context(work_id, path), msgspec.json.encode(value))

        payload = seal_fields(given.payload, paths, seal)
        return WorkInput(payload, given.key, given.correlation_key)

    def seal_accept(self, work_id: str, given: WorkInput) -> WorkInput:
        """An input for an existing Work (`accept`) with the fields it and the Work's binding
        mark sealed; `unknown_work` when the log has no such Work (caught up to its head
        first: a Work another process submitted is found, and its binding's marks apply)."""
        work = self.tx.projection.works.get(work_id)
        if work is None:
            self.tx.catch_up()
            work = self.tx.projection.works.get(work_id)
        if work is None:
            raise Refusal(f"no Work {work_id!r}: submit it first", code=DomainCode.UNKNOWN_WORK)
        return self.seal_input(work_id, given, self.binding_paths(work.binding))

    # -- opening -------------------------------------------------------------------------

    def open_inputs(self, work_id: str, payloads: Sequence[Any]) -> list[Any]:
        """The payloads with their sealed fields opened, for the job; raises `Unreadable`
        when the Work's key was destroyed or a token does not open."""
        opened: list[Any] = []
        key: bytes | None = None
        for payload in payloads:
            if type(payload) is not dict:
                opened.append(payload)
                continue
            if key is None:
                key = self._key_for(work_id, payload)
            opened.append(open_fields(payload, self._opener(work_id, key)) if key else payload)
        # (a Work's key is read once for all its inputs: they were sealed under the one key)
        return opened

    def _key_for(self, work_id: str, payload: dict[str, Any]) -> bytes | None:
        """The Work's key when `payload` holds markers; None when there is nothing to open:
        no marker, or no key and no forget recorded (a Work that never sealed anything, whose
        own data happens to look like a marker, gets it as given)."""
        if not has_markers(payload):
            return None
        # The record first: a submit racing the forget may have made a key after it.
        if self.store.find_delivery(forgotten_identity(work_id)) is not None:
            raise Unreadable(
                FailureCode.INPUT_FORGOTTEN,
                f"the personal input of Work {work_id!r} was forgotten; nothing was run",
            )
        return self.keys.get(work_id)

    def _opener(self, work_id: str, key: bytes) -> Callable[[str, str], Any]:
        cipher = self.cipher

        def open_(path: str, token: str) -> Any:
            try:
                return msgspec.json.decode(cipher.open(key, context(work_id, path), token))
            except (ValueError, msgspec.DecodeError):
                raise Unreadable(
                    FailureCode.INPUT_UNREADABLE,
                    f"personal field {path!r} of Work {work_id!r} does not open under its "
                    "key (a changed ciphertext); nothing was run",
                ) from None

        return open_

    # -- forgetting ----------------------------------------------------------------------

    def forget(self, work_id: str, *, by: str = "", reason: str = "") -> RecordedEvent:
        """Destroy the Work's key, then record `core.work.forgotten` (once: forgetting again
        destroys nothing more and returns the first record). The key goes first: a crash
        between the two leaves the data forgotten, and forgetting again records it."""
        for name, text in (("by", by), ("reason", reason)):
            if not isinstance(text, str) or len(text) > MAX_NOTE:
                raise RotaError(
                    f"forget: {name} must be text of at most {MAX_NOTE} characters",
                    code=DomainCode.INVALID_COMMAND,
                )
        tx = self.tx
        if tx.projection.works.get(work_id) is None:
            tx.catch_up()
            tx = self.tx
        if tx.projection.works.get(work_id) is None:
            raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
        self.keys.destroy(work_id)
        identity = forgotten_identity(work_id)
        event = WorkForgotten(work_id=work_id, by=by, reason=reason)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            if tx.store.find_delivery(identity) is not None:
                return [], {}
            return [Emit(f"personal/{work_id}", event, identity)], {}

        result = tx.transact(decide)
        if result.recorded:
            return result.recorded[0]
        recorded = tx.store.find_delivery(identity)
        assert recorded is not None  # (found by `decide`)
        return recorded


__all__ = ["PersonalData", "Unreadable", "context"]
