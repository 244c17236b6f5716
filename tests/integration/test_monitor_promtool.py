"""``specfleet monitor rules`` output run by promtool (Debian's ``prometheus`` package ships it;
``make test`` installs it): ``promtool check rules``, then ``promtool test rules`` on synthetic
vLLM series that put servers on each side of both alerts' thresholds in both load buckets.

The rules come from the stored synthetic sweep that adopted draft-k2 (break-even 1.40 tokens per
step at concurrency 1 and 1.67 at 4; 2.00 measured at both, noise floor 4.9%, so a drift floor
of 1.90). Each server's counters grow by fixed amounts a scrape, so its tokens per decode step
are (generated - first tokens) / decode steps per scrape, whatever rate() extrapolates."""

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.production.prometheus_rules import BELOW_BREAK_EVEN, DRIFT
from specfleet_cli.main import app
from tests.support.adopted_sweep import adopted_sweep

pytestmark = pytest.mark.integration

WINDOW = "1m"
SCRAPE = "15s"
MODEL = "prod-model"


@dataclass(frozen=True)
class Server:
    instance: str
    running: int
    generated: int
    """Tokens generated per scrape, ten decode steps and one first token among them."""
    speculative: bool = True
    below_break_even: bool = False
    drifted: bool = False

    @property
    def tokens_per_step(self) -> float:
        return (self.generated - 1) / 10


SERVERS = [
    Server("good:8000", running=1, generated=21),  # 2.0: as measured
    Server("drifting:8000", running=1, generated=17, drifted=True),  # 1.6: below the drift floor, above break-even
    Server("losing:8000", running=1, generated=13, drifted=True, below_break_even=True),  # 1.2
    # 1.6 at concurrency 4, below its break-even 1.67 (at concurrency 1 it would not be)
    Server("busy:8000", running=4, generated=17, drifted=True, below_break_even=True),
    Server("plain:8000", running=1, generated=11, speculative=False),  # a baseline server: no spec counters
]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise RuntimeError("promtool is missing: apt-get install -y prometheus (make test installs it)")
    return found


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("promtool")
    sweep = adopted_sweep(root)
    out = root / "rules" / "specfleet.yml"
    result = CliRunner().invoke(app, ["monitor", "rules", sweep.sweep_id, "--results-dir", str(sweep.results),
                                      "--window", WINDOW, "--model", MODEL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _series(server: Server) -> list[dict[str, str]]:
    labels = f'model_name="{MODEL}",engine="0",instance="{server.instance}",job="vllm"'
    per_scrape = {"vllm:generation_tokens_total": server.generated, "vllm:time_to_first_token_seconds_count": 1,
                  "vllm:inter_token_latency_seconds_count": 10}
    if server.speculative:
        per_scrape |= {"vllm:spec_decode_num_drafts_total": 10, "vllm:spec_decode_num_accepted_tokens_total": 15}
    series = [{"series": f"{name}{{{labels}}}", "values": f"0+{n}x40"} for name, n in per_scrape.items()]
    return [*series, {"series": f"vllm:num_requests_running{{{labels}}}", "values": f"{server.running}+0x40"}]


def _expected(rule: dict[str, object], server: Server) -> dict[str, object]:
    """The alert as Prometheus reports it: the recording rule's labels with the alert's, and the
    annotations with the server's value and labels in their templates."""
    def fill(text: str) -> str:
        return (text.replace('{{ $value | printf "%.2f" }}', f"{server.tokens_per_step:.2f}")
                .replace("{{ $labels.model_name }}", MODEL).replace("{{ $labels.instance }}", server.instance))

    annotations = rule["annotations"]
    assert isinstance(annotations, dict) and isinstance(rule["labels"], dict)
    sweep_labels = {"specfleet_sweep": annotations["sweep_id"], "specfleet_arm": annotations["arm"]}
    return {"exp_labels": {"model_name": MODEL, "instance": server.instance, **sweep_labels, **rule["labels"]},
            "exp_annotations": {key: fill(str(value)) for key, value in annotations.items()}}


def test_generated_rules_pass_promtool_check(rule_file: Path) -> None:
    result = subprocess.run([promtool(), "check", "rules", str(rule_file)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout  # three recording rules, two alerts per bucket


def test_both_alerts_fire_where_tokens_per_step_fall_and_only_there(rule_file: Path) -> None:
    rules = yaml.safe_load(rule_file.read_text())["groups"][0]["rules"]
    alerts = [r for r in rules if "alert" in r]
    alert_tests = []
    for name, condition in ((BELOW_BREAK_EVEN, "below_break_even"), (DRIFT, "drifted")):
        firing = [_expected(rule, server) for rule in alerts if rule["alert"] == name for server in SERVERS
                  if getattr(server, condition) and rule["labels"]["concurrency_bucket"] == str(server.running)]
        assert firing
        alert_tests += [{"eval_time": "1m", "alertname": name, "exp_alerts": []},  # pending for its window
                        {"eval_time": "5m", "alertname": name, "exp_alerts": firing}]
    acceptance, tokens = rules[0]["record"], rules[1]["record"]
    sweep_labels = ",".join(f'{k}="{v}"' for k, v in rules[0]["labels"].items())

    def samples(value: Callable[[Server], float]) -> list[dict[str, object]]:
        """round() drops the recorded name: the labels alone."""
        return [{"labels": f'{{model_name="{MODEL}",instance="{s.instance}",{sweep_labels}}}', "value": value(s)}
                for s in SERVERS if s.speculative]

    expr_tests = [  # 1 + 15 accepted / 10 drafts on every speculative server
        {"expr": f"round({tokens}, 0.01)", "eval_time": "5m", "exp_samples": samples(lambda s: s.tokens_per_step)},
        {"expr": f"round({acceptance}, 0.01)", "eval_time": "5m", "exp_samples": samples(lambda s: 2.5)},
    ]
    test_file = rule_file.parent / "specfleet_test.yml"
    test_file.write_text(yaml.safe_dump({
        "rule_files": [rule_file.name], "evaluation_interval": SCRAPE,
        "tests": [{"interval": SCRAPE, "input_series": [s for server in SERVERS for s in _series(server)],
                   "alert_rule_test": alert_tests, "promql_expr_test": expr_tests}],
    }, sort_keys=False, width=100_000))
    result = subprocess.run([promtool(), "test", "rules", str(test_file)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
