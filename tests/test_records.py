"""Run records (JSON Lines): a resumed run drops the rows of the steps it re-does and a line torn by a kill; readers
skip a bad line with a warning instead of refusing the file; held-out history and training time span every segment."""

from __future__ import annotations

import json
import logging

from r1kit import records
from r1kit.benchmarking.callbacks import HeldOutAccuracyCallback
from r1kit.report import load_jsonl


def write_rows(path, rows, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_rewind_keeps_the_checkpointed_steps_and_drops_later_rows_and_a_torn_line(tmp_path):
    path = tmp_path / "completions.jsonl"
    rows = [{"step": s, "completion": f"c{s}"} for s in (1, 1, 2, 3, 4)]
    write_rows(path, rows, tail='{"step": 4, "compl')
    assert records.rewind(path, 2) == 3
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 1, 2]
    assert records.rewind(path, 2) == 0  # nothing more to drop: the file is left alone


def test_a_fresh_start_empties_the_records_and_a_missing_file_is_fine(tmp_path):
    path = tmp_path / "completions.jsonl"
    write_rows(path, [{"step": 1}, {"step": 2}])
    assert records.rewind(path, 0) == 2 and path.read_text() == ""
    assert records.rewind(tmp_path / "absent.jsonl", 3) == 0


def test_rows_without_a_numeric_step_or_not_objects_are_dropped(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"step": 1}\n[1, 2]\n{"step": "2"}\n{"step": true}\nnot json\n{"step": 2}\n')
    records.rewind(path, 5)
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_readers_skip_a_bad_line_with_one_warning(tmp_path, caplog):
    path = tmp_path / "heldout_accuracy.jsonl"
    path.write_text('{"step": 0, "accuracy": 0.5}\n{"step": 2, "accur\n{"step": 4, "accuracy": 0.75}\n')
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in load_jsonl(path)] == [0, 4]
    assert "skipped 1 unreadable line" in caplog.text


def test_heldout_history_resumes_from_the_file_with_the_earlier_training_time(tmp_path):
    tracker = HeldOutAccuracyCallback(None, [], [], str(tmp_path))
    write_rows(tracker.path, [{"step": 0, "accuracy": 0.1, "train_seconds": 0.0},
                              {"step": 2, "accuracy": 0.3, "train_seconds": 12.5},
                              {"step": 4, "accuracy": 0.4, "train_seconds": 30.0}], tail='{"step": 6, "acc')
    tracker.resume_history(2)
    assert [r["step"] for r in tracker.history] == [0, 2]  # the summary's "before" is step 0's
    assert len(tracker.path.read_text().splitlines()) == 2
    assert tracker.training_seconds() == 12.5  # the time before the resume counts
    tracker.resume_history(0)  # a fresh start
    assert tracker.history == [] and tracker.training_seconds() == 0.0


def test_a_json_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    records.write_json(path, {"steps": 1})
    monkeypatch.setattr(records.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    try:
        records.write_json(path, {"steps": 2})
    except OSError:
        pass
    assert json.loads(path.read_text()) == {"steps": 1}  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left behind


def test_trainer_state_and_results_are_written_atomically_and_load_back(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from transformers import TrainerState

    from r1kit.run import pipeline as run

    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path)), state=TrainerState(global_step=3),
                              is_world_process_zero=lambda: True)
    run.save_state(trainer)
    run.save_metrics(trainer, "train", {"train_runtime": 1.5})
    run.save_metrics(trainer, "eval", {"eval_loss": 0.25})
    assert TrainerState.load_from_json(str(tmp_path / "trainer_state.json")).global_step == 3
    assert json.loads((tmp_path / "all_results.json").read_text()) == {"train_runtime": 1.5, "eval_loss": 0.25}
    trainer.state.global_step = 4
    monkeypatch.setattr(records.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    try:
        run.save_state(trainer)
    except OSError:
        pass
    assert TrainerState.load_from_json(str(tmp_path / "trainer_state.json")).global_step == 3  # old, whole
