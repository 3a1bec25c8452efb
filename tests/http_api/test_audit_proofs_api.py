"""`GET /v1/audit/inclusion` and `/v1/audit/consistency` (read scope): the proofs of
`rota audit prove --json` and `rota audit consistency --json`, against the checkpoints of
`[audit] checkpoint_dir`; 409 `no_covering_checkpoint` without one."""

from __future__ import annotations

import base64
from pathlib import Path

import rota
from http_api.conftest import Api, start_api
from rota.infrastructure import merkle
from rota.replay.checkpoint import Checkpointer


def test_proofs_over_http_verify_against_their_checkpoints(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    config = {"audit": {"checkpoint_dir": str(checkpoints)}}
    with rota.open(tmp_path / "r.db", config=config) as s:
        s.register("echo", lambda ctx: None)
        s.submit("w0", binding="echo")
        served = start_api(s, tmp_path)
        try:
            client = served.client("read")
            none = client.get("/v1/audit/inclusion", params={"position": 1})
            assert none.status_code == 409
            assert none.json()["error"]["code"] == "no_covering_checkpoint"
            old = Checkpointer(s.store, checkpoints).write()
            for i in range(1, 40):
                s.submit(f"w{i}", binding="echo")
            new = Checkpointer(s.store, checkpoints).write()
            head = client.get("/v1/audit/head").json()["checkpoint"]
            assert (head["position"], head["root"]) == (new.position, new.root)
            answer = client.get("/v1/audit/inclusion", params={"position": old.position})
            assert answer.status_code == 200, answer.text
            proof = answer.json()
            assert proof["format"] == "rota-inclusion/1" and proof["tree_size"] == new.position
            path = [bytes.fromhex(p) for p in proof["path"]]
            leaf = merkle.leaf_hash(bytes.fromhex(proof["event_hash"]))
            root = base64.b64decode(proof["checkpoint"].split("\n")[2])
            assert merkle.verify_inclusion(old.position - 1, new.position, leaf, path, root)
            params = {"old": old.position, "new": new.position}
            consistent = client.get("/v1/audit/consistency", params=params).json()
            assert consistent["format"] == "rota-consistency/1"
            steps = [bytes.fromhex(p) for p in consistent["path"]]
            old_root, new_root = bytes.fromhex(old.root or ""), bytes.fromhex(new.root or "")
            assert merkle.verify_consistency(old.position, new.position, old_root, new_root, steps)
            beyond = client.get("/v1/audit/inclusion", params={"position": new.position + 1})
            assert beyond.status_code == 409
            assert client.get("/v1/audit/inclusion", params={"position": 0}).status_code == 422
        finally:
            served.server.stop()


def test_without_a_checkpoint_dir_a_proof_is_refused(idle_api: Api) -> None:
    answer = idle_api.client("read").get("/v1/audit/consistency", params={"old": 1, "new": 1})
    assert answer.status_code == 409
    assert "checkpoint_dir" in answer.json()["error"]["message"]
