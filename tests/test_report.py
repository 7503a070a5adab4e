"""`r1kit report` and summary.json show the newest state of a run (a checkpoint newer than the finished segment's
final state, or the live run's last save) and say which segments of the run they show."""

from __future__ import annotations

import json
import signal
import time

import pytest

from r1kit.cli import main
from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline
from tests.helpers import tiny_recipe, write_recipe
from tests.test_lifecycle import STARTUP_SECONDS, Command


@pytest.mark.slow
def test_the_report_and_summary_show_the_newest_checkpoint_of_a_finished_run_continued_then_killed(
        tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, **tiny_recipe(
        tiny_model_dir, "r1kit:addition", out, max_steps=2, save_steps=1, dataset_prompt_column="prompt",
        callbacks=["heldout_accuracy"], heldout_size=8, heldout_eval_steps=1,
        reward_funcs=["accuracy", "tests.rewards_for_tests:slow_length_variety"]))
    pipeline(*parse_args(["--config", str(recipe)]))  # finished: its final state at step 2
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"

    continued = Command("grpo", recipe, "--max_steps", "20")  # the same run, continued; then a kill -9

    def saved_past(step: int) -> bool:  # summary.json is the last file a save writes
        try:
            return json.loads((out / "summary.json").read_text())["steps"] >= step
        except (OSError, ValueError, KeyError):
            return False

    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not saved_past(4):
            assert continued.proc.poll() is None and time.monotonic() < deadline, continued.log[-3000:]
            time.sleep(0.01)
        continued.proc.send_signal(signal.SIGKILL)
        continued.finish()
    finally:
        continued.kill()
    newest = max(int(p.parent.name.split("-")[1]) for p in out.glob("checkpoint-*/trainer_state.json"))
    reached = json.loads((out / "r1kit_run.json").read_text())["segments"][-1]["global_step"]
    assert newest >= reached >= 4

    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"Showing checkpoint-{newest}/trainer_state.json (step {newest})" in shown  # (it showed step 2's state)
    assert "no process holds the folder now (killed?)" in shown and "2 segment(s)" in shown
    assert "1. steps 0-2 completed  <- shown" in shown
    assert f"2. steps 2-{reached} running, from checkpoint-2  <- shown" in shown
    rows = [line.split() for line in shown.splitlines() if line.split() and line.split()[0].isdigit()]
    assert int(rows[-1][0]) == newest  # the table's last row is the newest step

    summary = json.loads((out / "summary.json").read_text())  # as of a checkpoint of the continued segment
    assert summary["status"] == "running" and summary["steps"] >= 4
    assert summary["segments"] == [[0, 2, "completed"], [2, summary["steps"], "running"]]
    assert summary["accuracy_curve"][-1][0] == summary["steps"]


def test_the_learning_rate_axis_reads_as_people_write_it():
    from r1kit.report import lr_label

    assert [lr_label(v) for v in (1.75e-4, 2e-4, 1e-3, 5.5e-7, 0.0)] == ["1.75e-4", "2e-4", "1e-3", "5.5e-7", "0"]


def test_no_panel_title_runs_into_another_or_past_the_edge(tmp_path):
    """Before: the two tripwire titles overlapped and were cut at the figure's edge."""
    import matplotlib.pyplot as plt

    from r1kit.report import figure

    history = [{"step": s, "reward": 0.1 * s, "loss": 0.0, "learning_rate": 1.75e-4, "tripwire/collapse": 0.2,
                "tripwire/collapse/fired": 0.0, "tripwire/length_blowup": 1.0, "tripwire/length_blowup/fired": 0.0}
               for s in range(1, 6)]
    fig = figure(tmp_path, history, [], {})
    fig.canvas.draw()
    renderer, edge = fig.canvas.get_renderer(), fig.bbox
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    for i, box in enumerate(titles):
        assert box.x0 >= edge.x0 and box.x1 <= edge.x1, fig.axes[i].get_title()
        for j, other in enumerate(titles[i + 1:], start=i + 1):
            assert not box.overlaps(other), (fig.axes[i].get_title(), fig.axes[j].get_title())
    learning_rate = next(ax for ax in fig.axes if ax.get_title() == "Learning rate")
    assert learning_rate.yaxis.get_major_formatter()(1.75e-4, 0) == "1.75e-4"
    plt.close(fig)


def test_a_run_with_tools_gets_a_tool_use_panel_its_titles_clear_of_the_others(tmp_path):
    import matplotlib.pyplot as plt

    from r1kit.report import figure

    history = [{"step": s, "reward": 0.1 * s, "loss": 0.0, "learning_rate": 1e-4, "tools/call_frequency": 0.5,
                "tools/failure_frequency": 0.1, "tools/rollouts_using": 0.1 * s, "tools/calls_per_rollout": 1.0,
                "tools/errors_per_rollout": 0.2, "tools/seconds_per_rollout": 0.05, "tripwire/collapse": 0.2,
                "tripwire/collapse/fired": 0.0} for s in range(1, 6)]
    for entry in history:
        entry["rewards/accuracy_reward/mean"] = 0.05 * entry["step"]
    heldout = [{"step": 0, "accuracy": 0.0, "tool_calls": 0.1, "tool_use": 0.1},
               {"step": 5, "accuracy": 0.6, "tool_calls": 1.0, "tool_use": 0.9}]
    fig = figure(tmp_path, history, heldout, {})
    fig.canvas.draw()
    titles = {ax.get_title(): ax for ax in fig.axes}
    shares, per_rollout = titles["Tool use and accuracy (training rollouts)"], titles["Tool use per rollout"]
    assert [line.get_label() for line in shares.lines] == ["rollouts calling a tool", "calls failed", "accuracy reward"]
    assert list(shares.lines[0].get_ydata()) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert list(shares.lines[2].get_ydata()) == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.25])
    # held-out accuracy and the share of held-out replies calling a tool, side by side on one panel
    evaluation = titles["Accuracy (greedy, held-out)"]
    assert {line.get_label(): list(line.get_ydata()) for line in evaluation.lines} == {
        "held-out accuracy": [0.0, 0.6], "held-out replies calling a tool": [0.1, 0.9]}
    assert {line.get_label() for line in per_rollout.lines} == {"calls", "errors", "tool seconds"}
    renderer = fig.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)
    without = figure(tmp_path, [{"step": 1, "reward": 0.0, "loss": 0.0, "learning_rate": 1e-4}], [], {})
    assert "Tool use per rollout" not in {ax.get_title() for ax in without.axes}  # no panel without tools
    plt.close(without)


def test_the_tripwire_panel_keeps_red_for_firing_and_its_legend_off_the_lines(tmp_path):
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    from r1kit.report import figure

    history = [{"step": s, "reward": 0.1, "loss": 0.0, "learning_rate": 1e-4, "tripwire/collapse": 0.1 * s,
                "tripwire/collapse/fired": 0.0, "tripwire/divergence": 0.05 * s, "tripwire/divergence/fired": 0.0,
                "tripwire/disagreement": 0.02 * s, "tripwire/disagreement/fired": 0.0,
                "tripwire/reward_jump": 0.03 * s, "tripwire/reward_jump/fired": 0.0} for s in range(1, 8)]
    fig = figure(tmp_path, history, [], {})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("Tripwires: divergence"))
    values = [line for line in panel.lines if line.get_linestyle() == "-"]
    thresholds = [line for line in panel.lines if line.get_linestyle() == "--"]
    assert len(values) >= 3 and thresholds
    for line in values:  # no unfired series in the red the title keeps for firing
        r, g, b = mcolors.to_rgb(line.get_color())
        assert not (r > 0.7 and g < 0.35 and b < 0.35), line.get_label()
    box = panel.get_legend().get_window_extent(renderer)
    for line in thresholds + values:  # the legend covers no threshold and no value
        xs, ys = line.get_xydata().T
        points = panel.transData.transform(list(zip(panel.get_xlim() if line in thresholds else xs, ys)))
        assert not any(box.contains(x, y) for x, y in points), line.get_label()
        assert all(y < box.y0 for _, y in points), line.get_label()
    plt.close(fig)
