"""Rebuild the chat, preference and text samples from the shipped GSM8K sample (MIT, see gsm8k/LICENSE).

    python -m framework.data.samples.build_samples

chat: the question as the user turn, the worked answer as the assistant's. preference: the worked
answer is chosen; rejected is the same answer with its final number changed (a wrong result that
reads like a right one). text: question and answer as one document, for pretraining.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

SAMPLES = Path(__file__).parent
FINAL = re.compile(r"####\s*(-?[\d,]+(?:\.\d+)?)\s*$")


def corrupt(answer: str, rng: random.Random) -> str:
    match = FINAL.search(answer)
    value = float(match.group(1).replace(",", ""))
    wrong = value + rng.choice([-1, 1]) * rng.randint(1, 9)
    text = f"{wrong:g}" if wrong != int(wrong) else str(int(wrong))
    body = answer[:match.start()]
    last_result = re.findall(r">>(-?[\d.,]+)", body)
    if last_result:  # the last calculation's result says the wrong number too
        body = body[::-1].replace(last_result[-1][::-1], text[::-1], 1)[::-1]
    return f"{body}#### {text}"


def main() -> None:
    rng = random.Random(0)
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (SAMPLES / "gsm8k" / f"{split}.jsonl").read_text().splitlines() if line]
        outputs = {
            "chat": [{"messages": [{"role": "user", "content": r["question"]},
                                   {"role": "assistant", "content": r["answer"]}]} for r in rows],
            "preference": [{"prompt": [{"role": "user", "content": r["question"]}], "chosen": r["answer"],
                            "rejected": corrupt(r["answer"], rng)} for r in rows],
            "text": [{"text": f"Question: {r['question']}\nAnswer: {r['answer']}"} for r in rows],
        }
        for name, records in outputs.items():
            lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
            (SAMPLES / name / f"{split}.jsonl").write_text(lines, encoding="utf-8")
            shutil.copy(SAMPLES / "gsm8k" / "LICENSE", SAMPLES / name / "LICENSE")


if __name__ == "__main__":
    main()
