"""`r1kit report OUTPUT_DIR`: the curves of a run, drawn to a PNG, and a compact table on the terminal.

Reads the newest trainer state (TRL's logged metrics: the top `trainer_state.json` or a checkpoint's, whichever
reached the later step, so a finished run that was continued and then killed shows its newest checkpoint, and a run in
progress its last save), `heldout_accuracy.jsonl` (the `heldout_accuracy` callback), `eval/checkpoint-*/<benchmark>.json`
(the `evaluate_benchmarks` callback) and the tripwires' firings (`tripwires.jsonl`, `tripwire_rollbacks.json`: a panel
of the wires, firing points marked). Above the table: which state it shows, the run's status and its segments (each
start of the run, from `r1kit_run.json`) and which of them the state covers. Below it: the training pass the run
measured and took per batch shape (`training_pass.json`).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from r1kit import records
from r1kit.console import add_pass_through_command
from r1kit.integrity import tripwires
from r1kit.integrity.tripwires import DEFAULT_WIRES
from r1kit.run.lifecycle import lock_held
from r1kit.state.checkpoints import read_run_record


def newest_state(output_dir: Path) -> tuple[Path, dict] | None:
    """(where, what) of the run's newest trainer state: the top's (a finished or stopped run's) or a checkpoint's,
    whichever reached the later step (the top's on a tie). A torn file is passed over while another one reads."""
    found, error = [], None
    for path in [output_dir / "trainer_state.json", *output_dir.glob("checkpoint-*/trainer_state.json")]:
        if not path.is_file():
            continue
        try:
            state = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            error = error or e
            continue
        step = state.get("global_step") if isinstance(state.get("global_step"), int) else 0
        found.append(((step, path.parent == output_dir), path, state))
    if not found and error is not None:
        raise error
    return max(found, key=lambda f: f[0])[1:] if found else None


def load_history(output_dir: Path) -> list[dict]:
    """TRL's per-step log entries, from the run's newest trainer state (`newest_state`)."""
    newest = newest_state(output_dir)
    return [] if newest is None else [e for e in newest[1].get("log_history", [])
                                      if "step" in e and "train_runtime" not in e]


def run_lines(output_dir: Path) -> list[str]:
    """What the report shows: the state it read (and the step it reached), the run's status (a `running` run whose
    folder no process holds was killed) and its segments, marking those the state covers."""
    newest = newest_state(output_dir)
    if newest is None:
        return []
    path, state = newest
    step = state.get("global_step", "?")
    lines = [f"Showing {path.relative_to(output_dir)} (step {step})"]
    record = read_run_record(str(output_dir))
    status = record.get("status")
    if status == "running" and not lock_held(output_dir):
        status = "running when it was last written; no process holds the folder now (killed?)"
    segments = [s for s in record.get("segments") or [] if isinstance(s, dict)]
    if status:
        lines.append(f"Run: {status}" + (f", {len(segments)} segment(s) (each start of the run):" if segments else ""))
    for number, segment in enumerate(segments, start=1):
        start = segment.get("from_step", 0)
        shown = isinstance(step, int) and isinstance(start, int) and start < step
        lines.append(f"  {number}. steps {start}-{segment.get('global_step', '?')} {segment.get('status', '?')}"
                     f"{', from ' + Path(segment['resumed_from']).name if segment.get('resumed_from') else ''}"
                     f"{'  <- shown' if shown else ''}")
    return lines


def load_jsonl(path: Path) -> list[dict]:
    """The rows of a run's JSON Lines record (none when it is absent); a torn or bad line is skipped with a warning."""
    return records.read(path) if path.is_file() else []


def load_benchmarks(output_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{benchmark: [(step, pass@1), ...]} from eval/checkpoint-N/<benchmark>.json."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(output_dir.glob("eval/*/*.json")):
        data = json.loads(path.read_text())
        step = data.get("step")
        if step is None:
            continue
        curves.setdefault(path.stem, []).append((int(step), float(data["metrics"]["pass@1"])))
    return {k: sorted(v) for k, v in curves.items()}


def series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(e["step"], e[key]) for e in history if isinstance(e.get(key), (int, float)) and math.isfinite(e[key])]
    return [p[0] for p in points], [p[1] for p in points]


def dropped_share(history: list[dict]) -> tuple[list[int], list[float]]:
    """Per step, the zero-std groups dynamic sampling dropped as a share of the groups it generated."""
    points = [(e["step"], e["sampling/zero_std_groups_dropped"] / e["sampling/groups_generated"]) for e in history
              if e.get("sampling/groups_generated") and isinstance(e.get("sampling/zero_std_groups_dropped"), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def reward_keys(history: list[dict]) -> list[str]:
    return sorted({k for e in history for k in e if k.startswith("rewards/") and k.endswith("/mean")})


def draw(output_dir: Path, history: list[dict], heldout: list[dict], benchmarks: dict) -> Path:
    """Draws the run's panels to OUTPUT_DIR/report.png; returns its path."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig = figure(output_dir, history, heldout, benchmarks)
    path = output_dir / "report.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def lr_label(value: float, _position=None) -> str:
    """A learning rate as people write it: 1.75e-4, 2e-5, 0 (matplotlib's default axis says 0.000175)."""
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def figure(output_dir: Path, history: list[dict], heldout: list[dict], benchmarks: dict):
    """The report's figure: reward, accuracy, length, KL (or loss), groups without signal, learning rate, the
    tripwires when the run had any, and tool use when the run had tools."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    wires = tripwire_keys(history)
    tools = any("tools/call_frequency" in e or "tools/rollouts_using" in e for e in history)
    rows = 3 + bool(wires) + tools
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.6 * rows + 0.2))
    ax = axes[0][0]
    ax.plot(*series(history, "reward"), color="black", linewidth=2, label="total reward")
    for key in reward_keys(history):
        ax.plot(*series(history, key), linewidth=1, alpha=0.8, label=key.split("/")[1])
    ax.set_title("Reward (training batches)")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    if heldout:
        ax.plot([r["step"] for r in heldout], [r["accuracy"] for r in heldout], marker="o", color="tab:green", label="held-out accuracy")
        using = [r for r in heldout if isinstance(r.get("tool_use"), (int, float))]
        if using:  # a run with tools: how often the held-out replies called one, beside how often they were right
            ax.plot([r["step"] for r in using], [r["tool_use"] for r in using], marker="^", color="tab:blue",
                    linestyle="--", label="held-out replies calling a tool")
    for name, points in benchmarks.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="s", label=f"{name} pass@1")
    ax.set_ylim(0, 1)
    ax.set_title("Accuracy (greedy, held-out)" if heldout else "Evaluation")
    if heldout or benchmarks:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no evaluation logged", ha="center", va="center", transform=ax.transAxes)
    ax = axes[1][0]
    ax.plot(*series(history, "completions/mean_length"), color="tab:purple")
    ax.set_title("Completion length (tokens, mean)")
    ax = axes[1][1]
    key = "kl" if series(history, "kl")[0] else "loss"
    ax.plot(*series(history, key), color="tab:red")
    ax.set_title("KL to the reference" if key == "kl" else "Loss (no KL logged: beta = 0)")
    ax = axes[2][0]  # groups whose completions all scored the same: no advantage, no gradient
    ax.plot(*series(history, "frac_reward_zero_std"), color="tab:orange", label="groups with zero reward std")
    dropped = dropped_share(history)
    if dropped[0]:
        ax.plot(*dropped, color="tab:brown", linestyle="--", label="share of generated groups dropped")
    ax.set_ylim(bottom=0)
    ax.set_title("Groups without signal (fraction)")
    ax.legend(fontsize=8)
    ax = axes[2][1]
    ax.plot(*series(history, "learning_rate"), color="tab:gray")
    ax.yaxis.set_major_formatter(FuncFormatter(lr_label))
    ax.set_title("Learning rate")
    if wires:
        draw_tripwires(axes[3][0], axes[3][1], history, wires, tripwires.firings(output_dir))
    if tools:
        draw_tool_use(axes[rows - 1][0], axes[rows - 1][1], history)
    for ax in axes.flat:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"r1kit run: {output_dir}", fontsize=10)
    fig.tight_layout()
    return fig


def draw_tool_use(shares, per_rollout, history: list[dict]) -> None:
    """The tool-use panel (`tools:` runs): on the left the share of rollouts that called a tool and of calls that
    failed, on the right calls, errors and tool seconds per rollout."""
    for key, label in (("tools/rollouts_using", "rollouts calling a tool"), ("tools/failure_frequency", "calls failed"),
                       ("tools/infrastructure_failures", "rollouts the sandbox failed")):
        if series(history, key)[0]:
            shares.plot(*series(history, key), linewidth=1.2, label=label)
    accuracy = next((k for k in reward_keys(history) if k.startswith("rewards/accuracy")), None)
    if accuracy:  # what the calls earn, on the same scale as how often they are made
        shares.plot(*series(history, accuracy), linewidth=1.2, color="tab:green", alpha=0.8, label="accuracy reward")
    shares.set_ylim(-0.02, 1.02)
    shares.set_title("Tool use and accuracy (training rollouts)")
    for key, label in (("tools/calls_per_rollout", "calls"), ("tools/errors_per_rollout", "errors"),
                       ("tools/seconds_per_rollout", "tool seconds")):
        if series(history, key)[0]:
            per_rollout.plot(*series(history, key), linewidth=1.2, label=label)
    per_rollout.set_title("Tool use per rollout")
    for ax in (shares, per_rollout):
        if ax.lines:
            ax.legend(fontsize=8)


def tripwire_keys(history: list[dict]) -> list[str]:
    """The tripwire values the run logged (`tripwire/<name>`, not their fired flags)."""
    return sorted({k for e in history for k in e if k.startswith("tripwire/") and not k.endswith("/fired")})


def draw_tripwires(ratios, shares, history: list[dict], keys: list[str], fired: list[dict]) -> None:
    """The tripwire panel: each wire's value over the steps, length ratios on the left and the others (shares and
    differences) on the right, its threshold dashed, and a red mark at each step it fired (a triangle where it
    rolled back)."""
    thresholds = {row["wire"]: row["threshold"] for row in fired if isinstance(row.get("threshold"), (int, float))}
    for number, key in enumerate(keys):
        name = key.split("/", 1)[1]
        ax = ratios if name.startswith("length_") else shares
        steps, values = series(history, key)
        # Never red: the title keeps red for firing
        (line,) = ax.plot(steps, values, linewidth=1.2, label=name, color=CALM_COLORS[number % len(CALM_COLORS)])
        threshold = thresholds.get(name, DEFAULT_WIRES[name].threshold if name in DEFAULT_WIRES else None)
        if threshold is not None:
            ax.axhline(threshold, color=line.get_color(), linestyle="--", linewidth=0.8, alpha=0.7)
        flagged = {s for s, v in zip(*series(history, f"{key}/fired")) if v > 0}
        points = [(s, v) for s, v in zip(steps, values) if s in flagged]
        if points:
            ax.scatter(*zip(*points), color="red", marker="x", s=30, zorder=3)
    for row in fired:
        ax = ratios if str(row.get("wire", "")).startswith("length_") else shares
        ax.axvline(row["step"], color="red", linewidth=0.8, alpha=0.5)
        if row.get("action") == "rollback":
            ax.scatter([row["step"]], [ax.get_ylim()[1]], color="red", marker="v", s=60, zorder=4)
    # Two lines each: on one line the two titles ran into each other and past the figure's edge.
    ratios.set_title("Tripwires: completion length ratios\n(threshold dashed, firing in red)", fontsize=10)
    shares.set_title("Tripwires: divergence, collapse, disagreement\n(threshold dashed, firing in red)", fontsize=10)
    for ax in (ratios, shares):
        if ax.lines:
            legend_above_the_lines(ax)


CALM_COLORS = ("tab:blue", "tab:green", "tab:purple", "tab:olive", "tab:cyan", "tab:brown", "tab:gray", "tab:pink")


def legend_above_the_lines(ax) -> None:
    """The legend in a band added above everything drawn (values and dashed thresholds), so it covers none of them."""
    low, high = ax.get_ylim()
    rows = -(-len(ax.get_legend_handles_labels()[0]) // 2)
    ax.set_ylim(low, high + (high - low) * (0.14 * rows + 0.06))
    ax.legend(fontsize=7, loc="upper left", ncol=2, framealpha=0.9)


def table(history: list[dict], heldout: list[dict], rows: int = 10) -> str:
    keys = ["reward", *reward_keys(history), "completions/mean_length", "frac_reward_zero_std",
            "sampling/zero_std_groups_dropped", "sampling/generation_rounds", "kl"]  # sampling: dynamic sampling runs
    keys = [k for k in keys if series(history, k)[0]]
    accuracy = {r["step"]: r["accuracy"] for r in heldout}
    calls = {r["step"]: r["tool_calls"] for r in heldout if isinstance(r.get("tool_calls"), (int, float))}
    picked = history[:: max(1, math.ceil(len(history) / rows))]
    if history and picked[-1] is not history[-1]:
        picked.append(history[-1])
    names = ["step", *[k.split("/")[1] if k.startswith("rewards/") else k.split("/")[-1] for k in keys]]
    if accuracy:
        names.append("held-out acc")
    if calls:
        names.append("h-o calls")
    lines = ["  ".join(f"{n:>12}" for n in names)]
    for entry in picked:
        cells = [f"{entry['step']:>12}"] + [f"{entry[k]:>12.3f}" if isinstance(entry.get(k), (int, float)) else f"{'-':>12}" for k in keys]
        if accuracy:
            nearest = max((s for s in accuracy if s <= entry["step"]), default=None)
            cells.append(f"{accuracy[nearest]:>12.3f}" if nearest is not None else f"{'-':>12}")
        if calls:
            nearest = max((s for s in calls if s <= entry["step"]), default=None)
            cells.append(f"{calls[nearest]:>12.2f}" if nearest is not None else f"{'-':>12}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def pass_lines(output_dir: Path) -> list[str]:
    """The training pass the run measured and took per batch shape (`training_pass.json`, written by
    r1kit.training.passchoice), one line each; none when the run measured nothing."""
    path = output_dir / "training_pass.json"
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return []
    lines = []
    for decision in record.get("decisions", []):
        seconds = decision.get("seconds", {})
        measured = ", ".join(f"{name} {'unusable' if t is None else f'{t * 1000:.1f} ms'}"
                             for name, t in sorted(seconds.items(), key=lambda kv: math.inf if kv[1] is None else kv[1]))
        if decision.get("as_for"):  # a neighbouring class's clear decision, taken without measuring
            lines.append(f"  {decision.get('class')}: {decision.get('pass')} (as for {decision['as_for']})")
        else:
            lines.append(f"  {decision.get('class')}: {decision.get('pass')} (measured: {measured})")
    if lines:
        lines.insert(0, f"Training pass, measured on this run's {record.get('device', 'device')} (fastest kept):")
    return lines + [f"  {note}" for note in record.get("notes", [])]


def report(output_dir: str | Path) -> tuple[Path, str]:
    """Draws `OUTPUT_DIR/report.png`; returns its path and the table (and the training pass the run took)."""
    output_dir = Path(output_dir)
    history = load_history(output_dir)
    if not history:
        raise FileNotFoundError(f"no trainer_state.json with logged steps in {output_dir} (or its checkpoints)")
    heldout = [r for r in load_jsonl(output_dir / "heldout_accuracy.jsonl")
               if isinstance(r.get("step"), int) and isinstance(r.get("accuracy"), (int, float))]
    heldout.sort(key=lambda r: r["step"])
    text = "\n".join([*run_lines(output_dir), "", table(history, heldout),
                      *(["", *pass_lines(output_dir)] if pass_lines(output_dir) else [])])
    return draw(output_dir, history, heldout, load_benchmarks(output_dir)), text


def add_parser(subparsers):
    """Adds `report` (a run's curves to a PNG, and a table) to the `r1kit` command."""
    return add_pass_through_command(subparsers, "report", "draw a run's curves: r1kit report OUTPUT_DIR", run)


def run(args) -> int:
    return report_command(list(args.argv))


def report_command(argv: list[str]) -> int:
    if not argv:
        print("r1kit: error: r1kit report needs OUTPUT_DIR, the output_dir of a run (see r1kit report --help)", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print("usage: r1kit report OUTPUT_DIR\n\n" + __doc__.strip())
        return 0
    if not Path(argv[0]).is_dir():
        print(f"r1kit: error: OUTPUT_DIR: {argv[0]} is not a folder; give the output_dir of a run", file=sys.stderr)
        return 2
    if len(argv) > 1:
        print(f"r1kit: error: r1kit report takes one OUTPUT_DIR, got {len(argv)} arguments: {' '.join(argv)}", file=sys.stderr)
        return 2
    try:
        path, text = report(argv[0])
    except (FileNotFoundError, NotADirectoryError) as e:
        print(f"r1kit: error: OUTPUT_DIR: {e}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as e:  # a trainer_state.json or results file cut short (a run killed mid-write)
        print(f"r1kit: error: OUTPUT_DIR: {argv[0]} holds a JSON file that cannot be read ({e})", file=sys.stderr)
        return 2
    print(text)
    print(f"\nCurves drawn to {path}")
    return 0
