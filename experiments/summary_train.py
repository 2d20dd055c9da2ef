"""Offline fitting of the summary model shipped in caption_debias/assets/summary_model.json.

Free labels: in real long captions the opening sentence is the summary. A conditional
logit (softmax over the sentences of one caption) learns weights that put the opening
sentence on top using only position-free features (summary.sentence_features); a
two-parameter logistic fit then maps raw scores to [0, 1]. Held-out figures come from
k-fold cross-validation by image key (benchmarks/bench_text_summary.py).

    .venv/bin/python experiments/summary_train.py --data /work/shared/data \
        --out caption_debias/assets/summary_model.json

Needs numpy and scipy (developer tools, not run-time dependencies).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from caption_debias.text.segment import get_segmenter
from caption_debias.text.summary import _NUMERIC as NUMERIC
from caption_debias.text.summary import sentence_features


def load_calibration(data: Path) -> list[dict]:
    """Long captions of the calibration folder: {key, style, caption} (style 'llm' or 'human')."""
    out = []
    for name in ("iiw400.jsonl", "iiw_cm3600.jsonl"):
        path = data / name
        if not path.exists():
            continue
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            key = row.get("image/key")
            for field, style in (("IIW", "human"), ("IIW-P5B", "llm")):
                if row.get(field):
                    out.append(
                        {"key": f"{name}:{key}", "style": style, "source": f"{name}:{field}", "caption": row[field]}
                    )
    return out


def fold_of(key: str, k: int) -> int:
    """Stable fold by image key, so both captions of one image land in the same fold."""
    return int(hashlib.md5(key.encode()).hexdigest(), 16) % k


def split_captions(rows: list[dict]) -> list[dict]:
    seg = get_segmenter("fast")
    out = []
    for r in rows:
        sents = [r["caption"][s:e] for s, e in seg.spans(r["caption"])]
        if len(sents) >= 2:
            out.append({**r, "sentences": sents})
    return out


# Openers of LLM-written long captions (ShareGPT4V, Urban1k, DreamLIP styles). The
# calibration captions (ImageInWords) rarely use them, so without help the model learns
# "starts with 'The'" = detail. Some training captions get their opening sentence
# re-phrased with one of these, keeping its words (the features are bag-of-words).
LLM_OPENERS = (
    "The image depicts ",
    "The image shows ",
    "The image captures ",
    "The image features ",
    "In this image, ",
    "This image shows ",
    "The photo shows ",
    "The picture shows ",
    "The image presents ",
    "In the image, ",
    "This is a photo of ",
    "The scene shows ",
)


def augment_openers(rows: list[dict], rate: float, seed: int = 0) -> list[dict]:
    """Copies of `rows` where a `rate` share of opening sentences start with an LLM opener."""
    import random

    rng = random.Random(seed)
    out = []
    for r in rows:
        s = r["sentences"]
        if rng.random() < rate and s[0][:1].isalpha():
            first = s[0][0].lower() + s[0][1:]
            r = {**r, "sentences": [rng.choice(LLM_OPENERS) + first, *s[1:]]}
        out.append(r)
    return out


def fit(rows: list[dict], l2: float = 1.0, min_df: int = 5, augment: float = 0.25, drop: tuple[str, ...] = ()) -> dict:
    """Weights of the conditional logit and the [0, 1] calibration, trained on `rows`."""
    import numpy as np
    from scipy import optimize, sparse

    rows = augment_openers(rows, augment)
    feats = [sentence_features(r["sentences"]) for r in rows]
    if drop:
        feats = [[{k: v for k, v in f.items() if k not in drop} for f in fs] for fs in feats]
    df: dict[str, int] = {}
    for fs in feats:
        for name in {k for f in fs for k in f}:
            df[name] = df.get(name, 0) + 1
    names = sorted(k for k, c in df.items() if c >= min_df or (k in NUMERIC and k not in drop))
    index = {k: i for i, k in enumerate(names)}
    data, ind, indptr, groups = [], [], [0], []
    for fs in feats:
        groups.append((len(indptr) - 1, len(fs)))
        for f in fs:
            for k, v in f.items():
                j = index.get(k)
                if j is not None and v:
                    ind.append(j)
                    data.append(v)
            indptr.append(len(ind))
    X = sparse.csr_matrix((np.array(data), np.array(ind), np.array(indptr)), shape=(len(indptr) - 1, len(names)))
    starts = np.array([g[0] for g in groups])
    sizes = np.array([g[1] for g in groups])
    seg_id = np.repeat(np.arange(len(groups)), sizes)
    y = np.zeros(X.shape[0])
    y[starts] = 1.0  # the opening sentence of each caption

    def loss(w):
        z = X @ w
        zmax = np.maximum.reduceat(z, starts)
        e = np.exp(z - zmax[seg_id])
        s = np.add.reduceat(e, starts)
        p = e / s[seg_id]
        nll = -(z[starts] - zmax - np.log(s)).sum()
        grad = X.T @ (p - y) + l2 * w
        return nll + 0.5 * l2 * (w @ w), grad

    res = optimize.minimize(loss, np.zeros(len(names)), jac=True, method="L-BFGS-B", options={"maxiter": 500})
    w = res.x
    z = X @ w

    def cal(p):  # logistic fit of is-opening on the raw score: maps scores to [0, 1]
        t = p[0] * z + p[1]
        q = 1 / (1 + np.exp(-t))
        eps = 1e-9
        nll = -(y * np.log(q + eps) + (1 - y) * np.log(1 - q + eps)).sum()
        g = q - y
        return nll, np.array([(g * z).sum(), g.sum()])

    c = optimize.minimize(cal, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B").x
    weights = {k: round(float(v), 4) for k, v in zip(names, w) if abs(v) >= 5e-4}
    return {"weights": weights, "calibration": {"scale": round(float(c[0]), 4), "offset": round(float(c[1]), 4)}}


def build_model(rows: list[dict], l2: float, min_df: int, trained_on: str) -> dict:
    fitted = fit(rows, l2=l2, min_df=min_df)
    return {
        "method": "conditional logit over position-free sentence features (summary.sentence_features)",
        "version": 1,
        "trained_on": trained_on,
        "l2": l2,
        "min_df": min_df,
        "calibration": fitted["calibration"],
        "mask": {"opening_min": 0.2, "opening_margin": 0.3},
        "weights": fitted["weights"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="folder with iiw400.jsonl and iiw_cm3600.jsonl")
    ap.add_argument("--out", type=Path, required=True, help="where to write the model JSON")
    ap.add_argument("--l2", type=float, default=1.0, help="L2 penalty of the conditional logit")
    ap.add_argument("--min-df", type=int, default=5, help="keep word features seen in at least this many captions")
    args = ap.parse_args()
    rows = split_captions(load_calibration(args.data))
    model = build_model(
        rows,
        args.l2,
        args.min_df,
        trained_on=f"{len(rows)} long captions of ImageInWords IIW-400 (human) and CM-3600 / IIW-400 (IIW-P5B, model-written), CC BY 4.0",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(model, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(model['weights'])} weights -> {args.out}")


if __name__ == "__main__":
    main()
