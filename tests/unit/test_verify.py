"""rota.verify, the standalone proof verifier: valid proofs at every size, the forged corpus.

Valid proofs come from an independent reference (tests/unit/verify_corpus.py: RFC 9162 as
the RFC states it, notes signed with `cryptography`, events chained by rota's own chain
code); every forgery of the corpus must be refused with its own reason.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import verify
from rota.verify import (
    VerificationError,
    check_consistency,
    leaf_hash,
    node_hash,
    parse_checkpoint,
    root_from_inclusion_path,
    verify_checkpoint,
    verify_consistency,
    verify_inclusion,
)

from .verify_corpus import CORPUS, KEY, LOG, OTHER_KEY, TEXT, Case, Log, N, Tree, sign

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "rota" / "verify.py"
BIG = Log(70)


def leaves(n: int) -> Tree:
    return Tree([hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n)])


# -- the pure helpers against the reference -------------------------------------------------


def test_leaf_and_node_hashes_are_rfc_9162s() -> None:
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert node_hash(b"l", b"r") == hashlib.sha256(b"\x01lr").digest()


# RFC 6962's reference tree (the vectors of transparency-dev/merkle's testonly package): the
# reference of these tests must agree with the world, not only with rota.verify.
CT_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]  # fmt: skip  # noqa: E501
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = {
    (0, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (5, 8): ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}  # fmt: skip
CT_CONSISTENCY = {
    (2, 8): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 5): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
}  # fmt: skip


def test_the_rfc_6962_reference_vectors() -> None:
    tree = Tree([bytes.fromhex(leaf) for leaf in CT_LEAVES])
    assert tree.root(0) == hashlib.sha256(b"").digest()
    assert [tree.root(n).hex() for n in range(1, 9)] == CT_ROOTS
    for (index, size), hexes in CT_INCLUSION.items():
        path = [bytes.fromhex(h) for h in hexes]
        assert tree.path(index, size) == path
        leaf = leaf_hash(tree.data[index])
        assert root_from_inclusion_path(index, size, leaf, path) == tree.root(size)
    for (old, new), hexes in CT_CONSISTENCY.items():
        proof = [bytes.fromhex(h) for h in hexes]
        assert tree.proof(old, new) == proof
        check_consistency(old, new, tree.root(old), tree.root(new), proof)


def test_every_inclusion_path_up_to_70_leads_to_the_root_and_no_other_index_does() -> None:
    tree = leaves(70)
    for size in range(1, 71):
        for index in range(size):
            leaf = hashlib.sha256(b"\x00" + tree.data[index]).digest()
            path = tree.path(index, size)
            assert root_from_inclusion_path(index, size, leaf, path) == tree.root(size)
            for other in range(size):
                if other != index:
                    try:
                        got = root_from_inclusion_path(other, size, leaf, path)
                    except VerificationError:
                        continue
                    assert got != tree.root(size), (index, other, size)


def test_every_consistency_proof_up_to_70_verifies() -> None:
    tree = leaves(70)
    for new in range(1, 71):
        for old in range(1, new + 1):
            proof = tree.proof(old, new)
            check_consistency(old, new, tree.root(old), tree.root(new), proof)


def test_every_single_hash_forged_in_a_small_tree_is_refused() -> None:
    tree = leaves(20)
    for size in range(1, 21):
        root = tree.root(size)
        for index in range(size):
            leaf = hashlib.sha256(b"\x00" + tree.data[index]).digest()
            path = tree.path(index, size)
            for at in range(len(path)):
                forged = [*path[:at], bytes(32), *path[at + 1 :]]
                assert root_from_inclusion_path(index, size, leaf, forged) != root
        for old in range(1, size):
            proof = tree.proof(old, size)
            for at in range(len(proof)):
                forged = [*proof[:at], bytes(32), *proof[at + 1 :]]
                with pytest.raises(VerificationError, match="does not lead to the"):
                    check_consistency(old, size, tree.root(old), root, forged)
            with pytest.raises(VerificationError, match="needs"):
                check_consistency(old, size, tree.root(old), root, proof[:-1])
            with pytest.raises(VerificationError, match="needs"):
                check_consistency(old, size, tree.root(old), root, [*proof, bytes(32)])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_inclusion_and_consistency_at_large_sizes(data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 5000), label="size")
    tree = leaves(size)
    index = data.draw(st.integers(0, size - 1), label="index")
    leaf = hashlib.sha256(b"\x00" + tree.data[index]).digest()
    assert root_from_inclusion_path(index, size, leaf, tree.path(index, size)) == tree.root(size)
    old = data.draw(st.integers(1, size), label="old")
    check_consistency(old, size, tree.root(old), tree.root(size), tree.proof(old, size))


@pytest.mark.parametrize(("index", "size"), [(-1, 5), (5, 5), (0, 0)])
def test_an_inclusion_path_for_a_leaf_outside_the_tree_is_refused(index: int, size: int) -> None:
    with pytest.raises(VerificationError, match=f"leaf index {index} is outside a tree of size"):
        root_from_inclusion_path(index, size, bytes(32), [])


def test_a_path_longer_than_the_deepest_tree_is_refused_before_any_hashing() -> None:
    with pytest.raises(VerificationError, match="the path has 64 hashes; index 0 of 2 needs 1"):
        root_from_inclusion_path(0, 2, bytes(32), [bytes(32)] * 64)


# -- whole proofs, signed ------------------------------------------------------------------


def test_every_event_of_every_tree_up_to_70_is_proven() -> None:
    for size in range(1, 71):
        note = BIG.note(size)
        for position in range(1, size + 1):
            event = verify_inclusion(BIG.inclusion(position, size, note), KEY.pem)
            assert (event.position, event.tree_size, event.origin) == (position, size, BIG.origin)
            assert event.event_hash == BIG.head(position)
            assert event.checkpoint.verified_by == KEY.name


def test_every_pair_of_trees_up_to_70_is_proven_consistent() -> None:
    notes = {size: BIG.note(size) for size in range(1, 71)}
    for new in range(1, 71):
        for old in range(1, new + 1):
            proof = BIG.consistency(old, new) | {
                "old_checkpoint": notes[old],
                "new_checkpoint": notes[new],
            }
            older, newer = verify_consistency(proof, KEY.raw)
            assert (older.tree_size, newer.tree_size) == (old, new)


def test_an_inclusion_proof_yields_the_event_decoded() -> None:
    event = verify_inclusion(json.dumps(LOG.inclusion(2, N)).encode(), KEY.vkey)
    envelope = LOG.envelopes[1]
    assert (event.stream, event.version, event.type, event.type_version) == (
        "work/2",
        1,
        "core.test.event",
        1,
    )
    assert event.delivery_id == "turn/2"
    assert event.recorded_at == "2026-12-07T21:02:00.000000Z"
    assert event.payload == envelope.partition(b"\n")[2]
    assert json.loads(event.payload)["text"] == "caf\u00e9"


def test_every_key_form_is_accepted(tmp_path: Path) -> None:
    pem_file = tmp_path / "key.pub"
    pem_file.write_bytes(KEY.pem)
    vkey_file = tmp_path / "key.vkey"
    vkey_file.write_text(KEY.vkey + "\n")
    forms = [KEY.pem, KEY.pem.decode(), KEY.raw, KEY.vkey, pem_file, str(pem_file), vkey_file]
    for key in forms:
        assert verify_checkpoint(LOG.note(N), key).verified_by == KEY.name


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (b"\x00" * 31, "neither a PEM public key, a vkey, nor 32 raw bytes"),
        ("/nonexistent/key.pub", "cannot read the key file"),
        (KEY.vkey.replace(KEY.name, OTHER_KEY.name), "the vkey's name or key hash is not"),
        (KEY.vkey.replace(KEY.key_hash.hex(), "00000000"), "the vkey's name or key hash is not"),
        (f"{KEY.name}+{KEY.key_hash.hex()}+" + base64.b64encode(b"\x02" + KEY.raw).decode(), "not an Ed25519 key"),  # noqa: E501
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not an Ed25519 public key"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_bad_key_is_refused_without_showing_it(key: Any, reason: str) -> None:
    with pytest.raises(VerificationError, match=reason) as refused:
        verify_checkpoint(LOG.note(N), key)
    assert base64.b64encode(KEY.raw).decode() not in str(refused.value)


def test_unsigned_checkpoints_pass_only_when_allowed() -> None:
    unsigned = LOG.inclusion(3, N, note=TEXT)
    with pytest.raises(VerificationError, match="the checkpoint is not signed"):
        verify_inclusion(unsigned, KEY.pem)
    event = verify_inclusion(unsigned, KEY.pem, allow_unsigned=True)
    assert event.checkpoint.verified_by is None
    assert verify_inclusion(LOG.inclusion(3, N), None, allow_unsigned=True).position == 3
    # allowing unsigned notes does not let a note signed by another key pass a key given
    with pytest.raises(VerificationError, match="not signed by"):
        verify_inclusion(LOG.inclusion(3, N, note=LOG.note(N, OTHER_KEY)), KEY.pem, allow_unsigned=True)  # fmt: skip  # noqa: E501


def test_a_note_signed_by_several_keys_passes_for_each() -> None:
    note = sign(TEXT, OTHER_KEY, KEY)
    assert verify_checkpoint(note, KEY.raw).verified_by == KEY.name
    assert verify_checkpoint(note, OTHER_KEY.raw).verified_by == OTHER_KEY.name


def test_parse_checkpoint_reads_the_lines() -> None:
    checkpoint = parse_checkpoint(LOG.note(N))
    assert checkpoint.origin == LOG.origin
    assert (checkpoint.tree_size, checkpoint.root) == (N, LOG.tree.root(N))
    assert (checkpoint.head, checkpoint.time) == (LOG.head(N), "2026-12-07T22:00:00.123456Z")
    assert checkpoint.text == TEXT
    assert [(s.name, s.key_hash) for s in checkpoint.signatures] == [(KEY.name, KEY.key_hash)]
    assert checkpoint.verified_by is None


def test_the_empty_tree_has_a_checkpoint_but_no_event() -> None:
    empty = Log(0)
    assert verify_checkpoint(empty.note(0), KEY.raw).tree_size == 0


def test_without_cryptography_a_signature_check_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "cryptography" or name.startswith("cryptography."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(VerificationError, match=r"pip install 'rota\[signing\]'"):
        verify_checkpoint(LOG.note(N), KEY.raw)
    assert verify_checkpoint(TEXT, KEY.raw, allow_unsigned=True).tree_size == N


# -- the corpus of forgeries ---------------------------------------------------------------


def refuse(case: Case) -> VerificationError:
    check = verify_inclusion if case.kind == "inclusion" else verify_consistency
    with pytest.raises(VerificationError) as refused:
        check(case.make(), case.key, allow_unsigned=case.allow_unsigned)
    return refused.value


def test_the_corpus_holds_at_least_30_distinct_forgeries_all_refused() -> None:
    assert len(CORPUS) >= 30
    assert len({(case.kind, case.name) for case in CORPUS}) == len(CORPUS)
    built = [
        json.dumps([c.kind, c.make(), str(c.key)], default=repr, sort_keys=True) for c in CORPUS
    ]
    assert len(set(built)) == len(built), "two cases build the same forgery"
    for case in CORPUS:
        refuse(case)


@pytest.mark.parametrize("case", CORPUS, ids=lambda case: f"{case.kind}: {case.name}")
def test_a_forgery_is_refused_for_its_reason(case: Case) -> None:
    reason = str(refuse(case))
    assert "\n" not in reason
    assert re.search(case.reason, reason), f"{case.name}: refused for {reason!r}"
    for secret in (KEY.pem.decode(), base64.b64encode(KEY.raw).decode(), KEY.raw.hex()):
        assert secret not in reason


def test_the_unforged_proofs_of_the_corpus_pass() -> None:
    from .verify_corpus import consistency, proof

    assert verify_inclusion(proof(), KEY.pem).position == 5
    assert verify_consistency(consistency(), KEY.pem)[1].tree_size == N


# -- standalone: no rota import, runs as a copied script -----------------------------------


def test_verify_imports_nothing_of_rota() -> None:
    allowed = {"argparse", "base64", "binascii", "hashlib", "json", "os", "re", "sys"}
    allowed |= {"dataclasses", "enum", "typing", "__future__", "cryptography"}
    found = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import"
            found.add(str(node.module).split(".")[0])
    assert found <= allowed, found - allowed


def run_copy(
    tmp_path: Path, *args: str, block_rota: bool = False
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "verify.py"
    shutil.copy(SOURCE, script)
    if block_rota:  # and prove it: any import of rota would fail
        code = (
            "import runpy, sys; sys.modules['rota'] = None; "
            f"sys.argv = ['verify.py', *{list(args)!r}]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')"
        )
        command = [sys.executable, "-I", "-c", code]
    else:
        command = [sys.executable, "-I", str(script), *args]
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_copy_of_the_file_alone_checks_proofs_as_a_script(tmp_path: Path) -> None:
    (tmp_path / "key.pub").write_bytes(KEY.pem)
    (tmp_path / "good.json").write_text(json.dumps(LOG.inclusion(4, N)))
    forged = LOG.inclusion(4, N) | {"path": LOG.inclusion(5, N)["path"]}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    (tmp_path / "consistent.json").write_text(json.dumps(LOG.consistency(3, N)))

    good = run_copy(tmp_path, "inclusion", "good.json", "--key", "key.pub")
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith(
        f"verified: position 4 (core.test.event on work/1) is in {LOG.origin}"
    )
    assert KEY.name in good.stdout

    bad = run_copy(tmp_path, "inclusion", "forged.json", "--key", "key.pub")
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.startswith("refused: the path does not lead from the event")

    blocked = run_copy(
        tmp_path, "consistency", "consistent.json", "--key", KEY.vkey, "--json", block_rota=True
    )
    assert blocked.returncode == 0, blocked.stderr
    result = json.loads(blocked.stdout)
    assert (result["ok"], result["old"]["tree_size"], result["new"]["tree_size"]) == (True, 3, N)
    assert result["new"]["verified_by"] == KEY.name


def test_python_dash_m_rota_verify_is_the_same_program(tmp_path: Path) -> None:
    (tmp_path / "proof.json").write_text(json.dumps(LOG.consistency(1, N)))
    command = [sys.executable, "-P", "-m", "rota.verify", "consistency", "proof.json"]
    done = subprocess.run(
        [*command, "--key", KEY.vkey], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("verified: tree size 13 (")


def test_the_command_line_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proof_file = tmp_path / "proof.json"
    proof_file.write_text(json.dumps(LOG.inclusion(N, N)))
    key = str(tmp_path / "key.pub")
    Path(key).write_bytes(KEY.pem)

    assert verify.main(["inclusion", str(proof_file), "--key", key, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["ok"], result["position"], result["event_hash"]) == (True, N, LOG.head(N))
    assert base64.b64decode(result["payload"]) == LOG.envelopes[N - 1].partition(b"\n")[2]

    assert verify.main(["consistency", str(proof_file), "--key", key, "--json"]) == 1
    refused = json.loads(capsys.readouterr().out)
    assert refused == {
        "ok": False,
        "kind": "consistency",
        "reason": "the proof is not a JSON object of format 'rota-consistency/1'",
    }

    assert verify.main(["inclusion", str(proof_file)]) == 1
    assert "no key was given" in capsys.readouterr().err

    proof_file.write_text(json.dumps(LOG.inclusion(2, N, note=TEXT)))
    assert verify.main(["inclusion", str(proof_file), "--allow-unsigned"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("; checkpoint signed by NO ONE (--allow-unsigned)\n")

    assert verify.main(["inclusion", str(tmp_path / "missing.json"), "--key", key]) == 1
    assert "refused: cannot read" in capsys.readouterr().err


def test_the_checkpoint_shown_in_docs_auditor_md_verifies() -> None:
    text = (ROOT / "docs" / "auditor.md").read_text().split("## Proofs without the log")[-1]
    found = re.search(r"```\n(rota/[^`]*?\n\n\u2014 [^`]*?\n)```", text)
    assert found, "docs/auditor.md lost its example checkpoint"
    assert verify_checkpoint(found.group(1), KEY.vkey).text == TEXT
