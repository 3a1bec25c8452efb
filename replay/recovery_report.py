"""What `rota recover-corrupt` answers: its report (the plan, or what it did) or its refusal."""

from __future__ import annotations

import msgspec

from rota.domain.errors import RotaError
from rota.replay.doctor_report import Check
from rota.replay.errors import ReplayCode
from rota.replay.rebuild import RebuildReport


class RecoveryRefused(RotaError):
    code = ReplayCode.RECOVERY_REFUSED


def refuse_healthy(health: list[Check], force: bool) -> tuple[list[str], bool]:
    """Doctor's projection checks as report lines, and whether `force` overrode a healthy
    verdict; or `projection_healthy` when none of them fails and `force` is not given:
    isolating a sound projection store only forces a rebuild (and a scheduler's catch-up
    from zero), and a sound store is often a sign that the trouble is elsewhere (the log,
    a daemon, the wrong `--store`)."""
    lines = [f"{c.name} {c.status}: {c.detail}" for c in health]
    if any(c.status == "fail" for c in health):
        return lines, False
    if force:
        return lines, True
    raise RecoveryRefused(
        "doctor finds the projections healthy (" + "; ".join(lines) + "): nothing to "
        "recover and nothing was moved; if they are wrong in a way doctor cannot see, pass "
        "--force to isolate and rebuild them anyway (docs/runbook-corruption.md)",
        code=ReplayCode.PROJECTION_HEALTHY,
    )


class IsolatedFile(msgspec.Struct):
    name: str
    original: str
    size: int
    sha256: str


class RecoveryReport(msgspec.Struct):
    dry_run: bool
    store: str
    projections: str
    backup: str
    files: list[IsolatedFile]
    log_checks: list[str]
    projection_integrity: list[str]
    log_head_before: int
    log_head_after: int | None = None
    manifest: str | None = None
    rebuilt: RebuildReport | None = None
    verified: bool | None = None
    appended: int = 0
    # Doctor's `projection_integrity` and `projection_drift` before anything moved; `forced`:
    # none of them failed and `--force` asked for the recovery anyway.
    projection_health: list[str] = msgspec.field(default_factory=list)
    forced: bool = False

    def lines(self) -> list[str]:
        if self.dry_run:
            out = ["dry run: nothing was changed"]
            out += [f"  log: {line}" for line in self.log_checks]
            out.append(f"  projection file: {'; '.join(self.projection_integrity)}")
            out += [f"  doctor: {line}" for line in self.projection_health]
            if self.forced:
                out.append("  --force: doctor finds them healthy; isolating them anyway")
            out.append(f"  would create {self.backup} and move into it:")
        else:
            manifest = self.manifest or "manifest.json"
            shown = "manifest.json" if manifest.endswith("manifest.json") else manifest
            out = [f"isolated {len(self.files)} file(s) into {self.backup} ({shown}):"]
        out += [f"    {f.name}  {f.size} bytes  sha256 {f.sha256}" for f in self.files]
        if self.dry_run or self.rebuilt is None:
            out.append(
                f"  then rebuild every projection from the log (head {self.log_head_before})"
            )
            return out
        names = ", ".join(self.rebuilt.projections)
        verdict = "digests equal a replay" if self.verified else "NOT VERIFIED"
        out.append(f"rebuilt {names} at position {self.rebuilt.position}: {verdict}")
        out.append(
            f"the log was only read: head {self.log_head_before} before, "
            f"{self.log_head_after} after; nothing appended"
        )
        return out
