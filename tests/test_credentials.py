"""Secrets never reach a file r1kit writes or pushes: canary secrets from every source (the recipe, its `env:` block,
the command line, the environment, the Hub's token file, ~/.netrc) through a run, its checkpoints, a resume and a push
to a local stand-in of the Hub, then every byte written scanned for them (pickles and their zip members too). A
resumed run takes its secrets from where they came from, not from the checkpoint."""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from r1kit import credentials
from r1kit.credentials import REDACTED, redact, redact_argv, seal, sealed
from tests.helpers import tiny_recipe, write_recipe

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------------------------
# The pieces
# --------------------------------------------------------------------------------------------------------------------
def test_a_secret_pickles_without_its_value_and_its_copies_keep_it():
    import torch

    token, url = sealed("hf_PickleCanary000001", whole=True), sealed("http://me:PickleCanary02@host:9/x", whole=False)
    buffer = io.BytesIO()
    torch.save({"token": token, "url": url}, buffer)
    assert b"PickleCanary" not in buffer.getvalue()
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False) == {"token": None, "url": f"http://{REDACTED}@host:9/x"}
    assert pickle.loads(pickle.dumps(token)) is None
    assert copy.deepcopy({"t": token})["t"] == "hf_PickleCanary000001" and copy.copy(url) == url
    assert f"Bearer {token}" == "Bearer hf_PickleCanary000001"  # what an HTTP library sends


def test_training_arguments_pickle_without_their_secrets_and_still_use_them(tmp_path):
    import torch

    from r1kit.config.schema import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), hub_token="hf_ArgsCanary0000003", report_to="none", bf16=False,
                      vllm_server_base_url="http://me:ArgsCanary04@127.0.0.1:8000")
    seal(args)
    torch.save(args, tmp_path / "training_args.bin")
    assert b"ArgsCanary" not in (tmp_path / "training_args.bin").read_bytes()
    assert b"ArgsCanary" not in zip_members(tmp_path / "training_args.bin")
    loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert loaded.hub_token is None and loaded.vllm_server_base_url == f"http://{REDACTED}@127.0.0.1:8000"
    assert args.hub_token == "hf_ArgsCanary0000003"  # the live run still pushes with it
    assert "ArgsCanary" not in args.to_json_string()  # what TensorBoard's args text and W&B's config record


def test_redaction_covers_known_values_urls_with_passwords_and_authorization_headers():
    credentials.remember("KnownCanary0005")
    text = ("KnownCanary0005 https://me:UrlCanary06@host/x Authorization: Bearer HeaderCanary07 "
            "{'authorization': 'Basic HeaderCanary08'} hf_" + "A" * 34)
    assert "Canary" not in redact(text) and "hf_AAA" not in redact(text)
    assert redact("TOKENIZERS_PARALLELISM=false, step 12, git@github.com:me/r.git") == \
        "TOKENIZERS_PARALLELISM=false, step 12, git@github.com:me/r.git"
    assert redact_argv(["grpo", "--hub_token", "abc", "--hub-token=abc", "--e2b_router_url", "http://u:pw@h"]) == [
        "grpo", "--hub_token", REDACTED, f"--hub-token={REDACTED}", "--e2b_router_url", f"http://{REDACTED}@h"]


def test_the_environment_and_the_providers_files_are_remembered_not_ordinary_variables(tmp_path, monkeypatch):
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password NetrcCanary0009\n")
    (tmp_path / "netrc").chmod(0o600)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "token"))
    (tmp_path / "token").write_text("hf_TokenFileCanary0010")
    environ = {"WANDB_API_KEY": "EnvCanary00011", "HTTPS_PROXY": "http://me:ProxyCanary12@proxy:3128",
               "SOME_SERVICE_TOKEN_FILE": "/where/it/is", "TOKENIZERS_PARALLELISM": "false-ish-value"}
    credentials.remember_environment(environ)
    line = "EnvCanary00011 ProxyCanary12 NetrcCanary0009 hf_TokenFileCanary0010 /where/it/is false-ish-value"
    assert redact(line) == " ".join([REDACTED] * 4 + ["/where/it/is", "false-ish-value"])


def test_every_log_record_is_redacted_whichever_library_logs_it(tmp_path):
    credentials.guard_logs()
    credentials.remember("LogCanary000013")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for name in ("transformers.some_module", "r1kit.anything"):
        log = logging.getLogger(name)
        log.addHandler(handler)
        try:
            log.warning("pushing with %s to %s", "LogCanary000013", "http://me:LogCanary14@host")
            try:
                raise RuntimeError("request failed with Authorization: Bearer LogCanary000013")
            except RuntimeError:
                log.exception("failed")
        finally:
            log.removeHandler(handler)
    assert "Canary" not in stream.getvalue() and stream.getvalue().count(REDACTED) >= 6


CRASH = """
import threading
from r1kit import credentials
credentials.remember("CrashCanary00018")
credentials.guard_logs()
def fail():
    raise OSError("CrashCanary00018")
worker = threading.Thread(target=fail)
worker.start()
worker.join()
raise RuntimeError("http://me:CrashCanary19@host: CrashCanary00018")
"""


def test_an_uncaught_exception_prints_no_secret():
    done = subprocess.run([sys.executable, "-c", CRASH], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "RuntimeError" in done.stderr and "Exception in thread" in done.stderr
    assert "CrashCanary" not in done.stderr


FAKE_SCORER = "import json, os\nprint(json.dumps({'ready': True}))\nprint(json.dumps({'env': sorted(os.environ)}))\n"


def test_processes_that_parse_answers_outside_a_jail_hold_no_secret(tmp_path, monkeypatch):
    """math-verify's workers and an unsandboxed reasoning-gym scorer parse model-written answers with parsers that
    eval (sympy's parse_expr): the trainer's secrets stay out of their environment; what else they need stays."""
    from r1kit.rewards import gym
    from r1kit.rewards.verify import VerifierPool

    monkeypatch.setenv("HF_TOKEN", "hf_ReachCanary000020")
    monkeypatch.setenv("HTTPS_PROXY", "http://me:ReachCanary21@proxy:3128")
    monkeypatch.setenv("R1KIT_VLLM_SECRET_FILE", "/where/the/secret/is")
    pool = VerifierPool(workers=1)
    worker = pool._start_worker()
    try:
        assert worker.conn.poll(120) and worker.conn.recv() == "ready"  # running, its imports done
        environ = Path(f"/proc/{worker.process.pid}/environ").read_bytes()
    finally:
        pool._kill(worker)
    assert b"ReachCanary" not in environ and b"R1KIT_VLLM_SECRET_FILE=" in environ and b"PATH=" in environ
    (tmp_path / "scorer.py").write_text(FAKE_SCORER)
    monkeypatch.setattr(gym, "SERVER", tmp_path / "scorer.py")
    replies, _ = gym._run_server(["{}"], timeout=5.0, isolate=False)
    assert "HF_TOKEN" not in replies[0]["env"] and "HTTPS_PROXY" not in replies[0]["env"] and "PATH" in replies[0]["env"]


def test_a_dry_run_and_an_error_line_name_no_secret(tmp_path, capsys, tiny_model_dir, math_jsonl):
    from r1kit.cli import main

    recipe = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out",
                                                  e2b_router_url="http://me:DryCanary00015@127.0.0.1:9"))
    assert main(["grpo", "--config", str(recipe), "--dry-run", "--hub_token", "hf_DryCanary000016"]) == 0
    assert main(["grpo", "--config", str(recipe), "--learning_rate", "http://me:DryCanary00017@x"]) == 2
    out = capsys.readouterr()
    assert "DryCanary" not in out.out + out.err and "recipe OK" in out.out


# --------------------------------------------------------------------------------------------------------------------
# A whole run: train, checkpoint, resume, push; then every byte written
# --------------------------------------------------------------------------------------------------------------------
LOCAL_HUB = '''
import concurrent.futures, fnmatch, json, shutil, sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import transformers.trainer

hub, used = Path(sys.argv.pop(1)), Path(sys.argv.pop(1))


def note(token):  # outside the scanned folders: which token each Hub call was given
    with used.open("a") as f:
        f.write(json.dumps(None if token is None else str(token)) + "\\n")


class LocalHubApi:
    """The Hub API transformers' Trainer pushes through, on a folder: an upload lands in HUB/<revision>/<path>,
    with the same ignore patterns."""

    def create_repo(self, repo_id, token=None, **kwargs):
        note(token)
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, repo_id, folder_path, token=None, ignore_patterns=None, path_in_repo=None, revision=None,
                      run_as_future=False, **kwargs):
        note(token)
        target = hub / (revision or "main") / (path_in_repo or "")
        for path in Path(folder_path).rglob("*"):
            relative = path.relative_to(folder_path).as_posix()
            if path.is_file() and not any(fnmatch.fnmatch(relative, p) for p in ignore_patterns or []):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target / relative)
        done = concurrent.futures.Future()
        done.set_result(None)
        return done if run_as_future else None


transformers.trainer.hf_api = LocalHubApi
huggingface_hub.HfApi.whoami = lambda self, *args, **kwargs: {"name": "me"}
from r1kit.cli import main

sys.exit(main(sys.argv[1:]))
'''

CANARIES = {
    "recipe hub_token": "hf_RecipeCanary0000101",
    "recipe router URL": "RouterCanary102",
    "recipe vLLM URL": "VllmUrlCanary103",
    "recipe env: block": "EnvBlockCanary104",
    "command line hub_token": "hf_CommandCanary00105",
    "HF_TOKEN": "hf_EnvironmentCanary106",
    "WANDB_API_KEY": "WandbCanary000107",
    "E2B_API_KEY": "E2bCanary00000108",
    "MORPH_API_KEY": "MorphCanary000109",
    "the Hub's token file": "hf_TokenFileCanary0110",
    "~/.netrc": "NetrcCanary000111",
}


def zip_members(path: Path) -> bytes:
    """The uncompressed members of a zip file (torch.save writes one), or nothing."""
    try:
        with zipfile.ZipFile(path) as archive:
            return b"".join(archive.read(name) for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return b""


def leaks(folders: list[Path], texts: dict[str, str]) -> list[str]:
    found = []
    for name, text in texts.items():
        found += [f"{source} in {name}" for source, canary in CANARIES.items() if canary in text]
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes() + zip_members(path)
            found += [f"{source} in {path}" for source, canary in CANARIES.items() if canary.encode() in data]
    return found


@pytest.mark.slow
def test_no_secret_from_any_source_reaches_a_file_written_or_pushed(tmp_path, tiny_model_dir, math_jsonl):
    home, hub, pushed, out = tmp_path / "home", tmp_path / "revisions", tmp_path / "hub", tmp_path / "out"
    (home / "hf").mkdir(parents=True)
    (home / "hf" / "token").write_text(CANARIES["the Hub's token file"])
    (home / ".netrc").write_text(f"machine api.wandb.ai login me password {CANARIES['~/.netrc']}\n")
    (home / ".netrc").chmod(0o600)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HOME": str(home),
           "HF_HOME": str(home / "hf"), "HF_TOKEN": CANARIES["HF_TOKEN"], "WANDB_API_KEY": CANARIES["WANDB_API_KEY"],
           "E2B_API_KEY": CANARIES["E2B_API_KEY"], "MORPH_API_KEY": CANARIES["MORPH_API_KEY"]}
    env.pop("NETRC", None)
    env["HF_HUB_OFFLINE"] = "0"  # push_to_hub needs the Hub; the stand-in is all it reaches (model and data are local)
    recipe = write_recipe(tmp_path, **tiny_recipe(
        tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=1, log_level="info", log_completions_file=True,
        hub_token=CANARIES["recipe hub_token"], push_to_hub=True, hub_model_id=f"file://{hub}",
        hub_strategy="all_checkpoints", callbacks=["push_to_hub_revision"], push_to_hub_revision=True,
        e2b_router_url=f"http://me:{CANARIES['recipe router URL']}@127.0.0.1:9",
        vllm_server_base_url=f"http://me:{CANARIES['recipe vLLM URL']}@127.0.0.1:8000",
        env={"MY_SERVICE_TOKEN": CANARIES["recipe env: block"], "PYTHONPATH": str(ROOT)}))
    logs, used = {}, tmp_path / "tokens_used.jsonl"
    for name, extra in (("first run", []), ("resumed run", ["--max_steps", "3", "--overwrite_hub_revision", "true",
                                                            "--hub_token", CANARIES["command line hub_token"]])):
        done = subprocess.run([sys.executable, "-c", LOCAL_HUB, str(pushed), str(used), "grpo", "--config", str(recipe),
                               *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        logs[f"{name}'s output"] = done.stdout + done.stderr
        if name == "first run":
            first_tokens = [json.loads(line) for line in used.read_text().splitlines()]
    report = subprocess.run([sys.executable, "-m", "r1kit.cli", "report", str(out)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    logs["r1kit report's output"] = report.stdout + report.stderr

    assert "continues" in logs["resumed run's output"] and (out / "checkpoint-3").is_dir()
    assert "  env      the recipe sets PYTHONPATH" in logs["first run's output"]  # a loader variable, named
    assert sorted(p.name for p in hub.iterdir()) == [f"main-step-00000000{n}" for n in (1, 2, 3)]
    assert {"checkpoint-1", "checkpoint-3", "model.safetensors", "trainer_state.json"} <= {
        p.name for p in (pushed / "main").iterdir()}
    assert (pushed / "main" / "checkpoint-3" / "optimizer.pt").is_file()  # a pushed checkpoint still resumes
    assert leaks([out, hub, pushed], logs) == []
    # Nothing of this machine reaches the Hub: no local path, host name or user name in any file pushed or published
    import getpass
    import socket

    private = {"a local path": str(tmp_path), "the repository's path": str(ROOT), "the user name": f"/{getpass.getuser()}/"}
    host = re.compile(rf"(?<![\w.-]){re.escape(socket.gethostname())}(?![\w.-])")
    for folder in (hub, pushed):
        for path in (p for p in folder.rglob("*") if p.is_file()):
            data = (path.read_bytes() + zip_members(path)).replace(f"file://{hub}".encode(), b"")  # (the Hub id given)
            assert not [what for what, text in private.items() if text.encode() in data], path
            if path.suffix in (".json", ".md", ".txt", ".jinja", ".yaml"):  # (a short name recurs in binary weights)
                assert not host.search(data.decode("utf-8", "replace")), path
    # The secrets were there to leak: the pushes used them, each run the one its own recipe or command line gave.
    tokens = [json.loads(line) for line in used.read_text().splitlines()]
    assert set(first_tokens) == {CANARIES["recipe hub_token"]}
    assert set(tokens[len(first_tokens):]) == {CANARIES["command line hub_token"]}
    import torch

    saved = torch.load(out / "checkpoint-3" / "training_args.bin", weights_only=False)
    assert saved.hub_token is None and saved.push_to_hub  # the rest of the arguments is kept
    record = json.loads((out / "r1kit_run.json").read_text())
    assert REDACTED in record["argv"] and "--hub_token" in record["argv"]
