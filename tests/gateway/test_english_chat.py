#!/usr/bin/python3
"""The first chat a new user has: flashgate-cli chat against a real flashgate serving the
committed default model, models/flash-english.gguf, answers in English.

A user line goes through the CLI's chat mode (piped stdin, greedy); the reply on stdout must
hold at least MIN_WORDS words, and at least MIN_KNOWN of them (lowercased) must be words of
tests/english/words.txt: the training corpus's own dictionary (every lowercase word seen at
least twice in it; /usr/share/dict/words is not installed on the build machines). The random
models this replaces answer with byte salad, whose "words" are mostly fragments that no
dictionary holds (measured: the random tiny model's greedy reply has 6 of 13 known words,
and fails; the trained model's has 8 of 8).

Run: /usr/bin/python3 test_english_chat.py   (FG_BIN must hold flashgate and flashgate-cli)
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN_DIR, KEYS, PATH, SOURCE_DIR, Server, check, eq, log, run_tests  # noqa: E402

CLI = os.path.join(BIN_DIR, "flashgate-cli")
MODEL = os.path.join(SOURCE_DIR, "models", "flash-english.gguf")
harness.MODEL = MODEL   # the servers here serve the committed model, not the generated tiny one
WORDS = os.path.join(SOURCE_DIR, "tests", "english", "words.txt")
MIN_WORDS = 6
MIN_KNOWN = 0.8


def dictionary():
    with open(WORDS) as f:
        return {w.strip() for w in f if w.strip()}


def reply_words(text):
    return re.findall(r"[A-Za-z]+", text)


async def test_chat_answers_in_english():
    words = dictionary()
    check(len(words) > 10000, f"{WORDS} holds {len(words)} words")
    async with Server(sessions={"default_max_output_tokens": 48}) as srv:
        cmd = [CLI, "chat", "--url", f"ws://127.0.0.1:{srv.port}{PATH}", "--key", KEYS["acme"],
               "--temperature", "0", "--max-output-tokens", "48"]
        p = subprocess.run(cmd, input="Hello, who are you?\n", capture_output=True, text=True, timeout=120)
        eq(p.returncode, 0, f"exit status (stderr: {p.stderr})")
        got = reply_words(p.stdout)
        known = [w for w in got if w.lower() in words]
        log(f"reply: {p.stdout.strip()!r}")
        log(f"{len(known)} of {len(got)} words in the corpus dictionary")
        check(len(got) >= MIN_WORDS, f"a reply of at least {MIN_WORDS} words: {p.stdout!r}")
        check(len(known) >= MIN_KNOWN * len(got), f"at least {MIN_KNOWN:.0%} dictionary words: {p.stdout!r}")


if __name__ == "__main__":
    run_tests(globals())
