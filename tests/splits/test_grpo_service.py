"""The GRPO recipe through the grading service: TRL's GRPOTrainer, two steps on CPU with a tiny
random model, its rewards the service's sync and async reward functions, the service serving the
published dataset by ``problem_id``; the rewards and kernelmill's metrics reach the logs."""
import pytest
from fixtures.tiny_lm import tiny_model_and_tokenizer
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.store import JsonlWriter
from kernelmill.splits.publish import publish_dataset
from kernelmill.splits.split import split_file

pytest.importorskip("starlette", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("prometheus_client", reason="the serve extra: pip install -e '.[serve]'")
try:  # a venv with torchvision/timm beside another torch can break transformers' imports
    from trl import GRPOConfig, GRPOTrainer
except (ImportError, RuntimeError) as exc:
    pytest.skip(f"trl's GRPOTrainer does not import here: {exc}", allow_module_level=True)


@pytest.fixture
def published(tmp_path, seeds_dir):
    records = [record_from_file(p) for p in problem_files(seeds_dir)[:12]]
    with JsonlWriter(tmp_path / "curated.jsonl") as writer:
        for r in records:
            writer.write(r)
    split_file(tmp_path / "curated.jsonl", tmp_path / "split", eval_fraction=0.25)
    publish_dataset(tmp_path / "split", tmp_path / "dataset")
    return tmp_path / "dataset"


def test_grpo_trains_two_steps_rewarded_by_the_service(published, tmp_path):
    from datasets import load_dataset
    from kernelmill.grade.policy import Policy
    from kernelmill.grade.service.app import Running
    from kernelmill.grade.service.core import ServeConfig, Service
    from kernelmill.grade.service.trl import async_service_reward_fn, service_reward_fn

    train = load_dataset(str(published))["train"]
    texts = [m["content"] for row in train for m in row["prompt"]]
    model, tokenizer = tiny_model_and_tokenizer(texts)
    service = Service(ServeConfig(dataset=str(published), device="cpu", backend="local",
                                  actors=2, policy=Policy(time=False, trials=2), token=""))
    with Running(service) as url:
        args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2,
                          num_generations=2, max_completion_length=8, max_steps=2,
                          logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                          seed=0)
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, train_dataset=train,
                              reward_funcs=[service_reward_fn(url),
                                            async_service_reward_fn(url)], args=args)
        trainer.train()
        registry = service.metrics.registry
        submitted = registry.get_sample_value("kernelmill_jobs_submitted_total")
        deduplicated = registry.get_sample_value("kernelmill_jobs_deduplicated_total")
    logs = [entry for entry in trainer.state.log_history if "kernelmill/compiled" in entry]
    assert len(logs) == 2  # one per step: the reward's metrics reached the trainer
    for entry in logs:
        # random tokens are never a ModelNew: graded by the service, reward 0, not "n/a"
        assert entry["kernelmill/compiled"] == 0.0 and entry["kernelmill/not_applicable"] == 0.0
        assert entry["rewards/kernelmill_service/mean"] == 0.0
        assert entry["rewards/kernelmill_service_async/mean"] == 0.0
    assert submitted == 2 * 2 * 2  # two steps, two completions, two reward functions
    assert deduplicated >= 4  # the second reward's submissions were the first's: graded once
