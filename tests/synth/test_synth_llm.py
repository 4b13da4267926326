"""LLM proposer against a fake OpenAI-compatible server on 127.0.0.1."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kernelmill.core.errors import KernelmillError
from kernelmill.core.stats import StageStats
from kernelmill.synth.generate import Synthesizer, load_seeds
from kernelmill.synth.llm import LLMConfig, LLMProposer, extract_code

PROPOSAL = '''"""Row-wise RMS of a GELU activation.

category: reduction
level: 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x).pow(2).mean(dim=-1).sqrt()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''


class FakeEndpoint(BaseHTTPRequestHandler):
    answers: list[str] = []
    requests: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeEndpoint.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
        if not FakeEndpoint.answers:
            self.send_response(500)
            self.end_headers()
            return
        content = FakeEndpoint.answers.pop(0)
        payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content}}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeEndpoint.answers, FakeEndpoint.requests = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_extract_code_prefers_the_block_defining_model():
    text = f"Here:\n```bash\npip install torch\n```\n```python\n{PROPOSAL}```\nDone."
    assert extract_code(text) == PROPOSAL
    assert extract_code(PROPOSAL) == PROPOSAL
    with pytest.raises(ValueError):
        extract_code("I cannot help with that.")


def test_config_reads_environment(monkeypatch):
    monkeypatch.setenv("KERNELMILL_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("KERNELMILL_LLM_MODEL", "tiny")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = LLMConfig().resolved()
    assert (cfg.base_url, cfg.model) == ("http://127.0.0.1:9/v1", "tiny")
    monkeypatch.delenv("KERNELMILL_LLM_MODEL")
    with pytest.raises(KernelmillError, match="model"):
        LLMConfig().resolved()


def test_proposer_sends_few_shot_prompt_and_extracts_code(endpoint):
    FakeEndpoint.answers = [f"Sure!\n```python\n{PROPOSAL}```"]
    proposer = LLMProposer(LLMConfig(base_url=endpoint, model="fake-coder", api_key="k"))
    source = proposer.propose("reduction", ["EXAMPLE_ONE", "EXAMPLE_TWO"])
    assert source == PROPOSAL
    request = FakeEndpoint.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer k"
    assert request["body"]["model"] == "fake-coder"
    user = request["body"]["messages"][-1]["content"]
    assert "EXAMPLE_ONE" in user and "EXAMPLE_TWO" in user and "`reduction`" in user


def test_synthesizer_keeps_valid_proposals_and_drops_bad_ones(endpoint, tmp_path):
    from kernelmill.data import SEEDS_DIR
    seeds = load_seeds(SEEDS_DIR)
    FakeEndpoint.answers = [f"```python\n{PROPOSAL}```", "no code at all",
                            "```python\nclass Model:\n    pass\n```"]
    proposer = LLMProposer(LLMConfig(base_url=endpoint, model="fake-coder", api_key="k"))
    synth = Synthesizer(seeds, seed=0, llm=proposer, llm_fraction=1.0)
    stats = StageStats("synth")
    import random
    first = synth.from_llm(random.Random(0), stats)
    assert first.provenance["generator"] == "llm" and first.provenance["parent"] is None
    assert first.provenance["seed"] == first.id
    assert first.provenance["operations"][0]["model"] == "fake-coder"
    assert first.category == "reduction"
    for index in (1, 2):
        assert synth.attempt(index, stats) is None
    assert stats.counts["dropped: llm: no code"] == 1
    assert stats.counts["dropped: static check"] == 1


def test_endpoint_errors_are_counted_not_raised(endpoint):
    from kernelmill.data import SEEDS_DIR
    proposer = LLMProposer(LLMConfig(base_url=endpoint, model="fake-coder", api_key="k"))
    synth = Synthesizer(load_seeds(SEEDS_DIR)[:3], seed=0, llm=proposer, llm_fraction=1.0)
    stats = StageStats("synth")
    assert synth.attempt(0, stats) is None
    assert stats.counts["dropped: llm: endpoint error"] == 1
