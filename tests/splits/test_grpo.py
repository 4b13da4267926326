"""The GRPO recipe of docs/GRADING.md runs as written on a published dataset: TRL's GRPOTrainer, two steps
on CPU, a random 2-layer Llama and a BPE tokenizer trained here (nothing downloaded), the reward
being ``kernelmill.grade.trl.reward_fn`` itself; the rewards and kernelmill's metrics reach the
trainer's logs."""
import pytest
from fixtures.tiny_lm import tiny_model_and_tokenizer
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.store import JsonlWriter
from kernelmill.splits.publish import publish_dataset
from kernelmill.splits.split import split_file

trl = pytest.importorskip("trl")


@pytest.fixture
def published(tmp_path, seeds_dir):
    records = [record_from_file(p) for p in problem_files(seeds_dir)[:12]]
    with JsonlWriter(tmp_path / "curated.jsonl") as writer:
        for r in records:
            writer.write(r)
    split_file(tmp_path / "curated.jsonl", tmp_path / "split", eval_fraction=0.25)
    publish_dataset(tmp_path / "split", tmp_path / "dataset")
    return tmp_path / "dataset"


def test_grpo_trains_two_steps_on_the_published_dataset(published, tmp_path, monkeypatch):
    from datasets import load_dataset
    from kernelmill.grade.trl import reward_fn
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("KERNELMILL_DEVICE", "cpu")
    train = load_dataset(str(published))["train"]  # as the card says, nothing renamed or added
    texts = [m["content"] for row in train for m in row["prompt"]]
    model, tokenizer = tiny_model_and_tokenizer(texts)
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=8, max_steps=2, logging_steps=1,
                      report_to=[], use_cpu=True, save_strategy="no", seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward_fn],
                          train_dataset=train, args=args)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "kernelmill/compiled" in entry]
    assert len(logs) == 2  # one per step: the reward's metrics reached the trainer
    for entry in logs:
        # random tokens are never a ModelNew: graded, not compiled, reward 0, not "n/a"
        assert entry["kernelmill/compiled"] == 0.0 and entry["kernelmill/not_applicable"] == 0.0
        assert entry["rewards/reward_fn/mean"] == 0.0 and entry["reward"] == 0.0
