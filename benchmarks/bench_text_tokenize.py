"""Tokenization CPU time per caption: the prepare path (encode_caption) with its BPE in Rust vs in Python.

On the real long captions (split with the `fast` segmenter first, not timed), one process:
  new:     caption_debias.text.tokenize.ClipTokenizer.encode_caption (Python cleaning, caches
           and split; BPE of unseen words in HF `tokenizers`)
  old:     the same class with open_clip's pure-Python `bpe` for unseen words (the algorithm
           this module ran before; open_clip's SimpleTokenizer is imported here only)
  hf-full: a tokenizers.Tokenizer configured like CLIPTokenizerFast (open_clip's split regex,
           case-insensitive, ByteLevel without its own regex, BPE with "</w>"), given the
           already-cleaned sentences, one encode_batch per caption (ids checked equal)
  batch:   what prepare runs per chunk: ClipTokenizer.local_caption per caption, then one
           encode_sentences over the sentences of every caption that needs no ftfy (Arrow
           split + dictionary_encode, ids gathered with take); encode_caption for the others
cold = first pass of a fresh instance over the captions (every new word goes through BPE),
warm = the next pass (caches full). CPU time (time.process_time), best of --repeats.

    .venv/bin/python benchmarks/bench_text_tokenize.py
"""

from __future__ import annotations

import argparse
import os
import time

from _common import add_data_option, long_captions


def python_bpe_tokenizer():
    """ClipTokenizer whose unseen words go through open_clip's Python BPE (the old path)."""
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.text.tokenize import ClipTokenizer

    class PythonBPE(ClipTokenizer):
        def __init__(self):
            super().__init__()
            self._ref = SimpleTokenizer()

        def _word(self, piece):
            ids = self._word_ids.get(piece)
            if ids is None:
                mapped = "".join(self._byte_table[b] for b in piece.encode("utf-8"))
                ids = tuple(self._ref.encoder[t] for t in self._ref.bpe(mapped).split(" "))
                self._word_ids[piece] = ids
            return ids

    return PythonBPE


def hf_full_tokenizer(vocab_path: str):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core, as in a prepare worker
    import gzip

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    from caption_debias.text.tokenize import SPECIAL_TOKENS, _bytes_to_unicode

    merges = [
        tuple(m.split()) for m in gzip.open(vocab_path).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    ]
    chars = list(_bytes_to_unicode().values())
    vocab = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges] + list(SPECIAL_TOKENS)
    tk = Tokenizer(
        models.BPE(
            vocab={t: i for i, t in enumerate(vocab)},
            merges=merges,
            end_of_word_suffix="</w>",
            continuing_subword_prefix="",
        )
    )
    pattern = r"""(?i)<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tk


def best_of(fn, repeats: int) -> tuple[float, float]:
    """(cold, warm) CPU seconds, best of `repeats`; fn(fresh) runs one pass."""
    cold, warm = [], []
    for _ in range(repeats):
        state = fn(None)
        c0 = time.process_time()
        fn(state)
        cold.append(time.process_time() - c0)
        c0 = time.process_time()
        fn(state)
        warm.append(time.process_time() - c0)
    return min(cold), min(warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import ClipTokenizer

    caps = long_captions(args.data)
    seg = get_segmenter("fast")
    pairs = [(c, seg.spans(c)) for c in caps]
    n = len(pairs)
    PythonBPE = python_bpe_tokenizer()

    def run(cls):
        def one(tok):
            if tok is None:
                return cls()
            for c, s in pairs:
                tok.encode_caption(c, s)

        return one

    new, old = ClipTokenizer(), PythonBPE()
    assert [new.encode_caption(c, s) for c, s in pairs] == [old.encode_caption(c, s) for c, s in pairs]
    results = {"new": best_of(run(ClipTokenizer), args.repeats), "old": best_of(run(PythonBPE), args.repeats)}

    def batch(tok):
        if tok is None:
            return ClipTokenizer()
        local = []
        for c, s in pairs:
            if tok.local_caption(c, s) is None:
                tok.encode_caption(c, s)
            else:
                local += [c[a:b] for a, b in s]
        return tok.encode_sentences(local)

    plan = [new.local_caption(c, s) for c, s in pairs]
    ids, counts = batch(new)
    want = [x for (c, s), p in zip(pairs, plan) if p is not None for x in new.encode_caption(c, s)[0]]
    assert ids.tolist() == [i for x in want for i in x] and counts.tolist() == list(map(len, want))
    results["batch"] = best_of(batch, args.repeats)

    try:
        hf = hf_full_tokenizer(new.vocab_path)
    except ImportError:
        hf = None
    if hf is not None:
        cleaned = [[new.clean(c[s:e]) for s, e in sp] for c, sp in pairs]
        assert [[e.ids for e in hf.encode_batch(x, add_special_tokens=False)] for x in cleaned] == [
            new.encode_caption(c, s)[0] for c, s in pairs
        ]

        def hf_pass(state):
            if state is None:
                return hf_full_tokenizer(new.vocab_path)
            for sents in cleaned:  # sentences only: no caption count, no cleaning timed
                [e.ids for e in state.encode_batch(sents, add_special_tokens=False)]

        results["hf-full"] = best_of(hf_pass, args.repeats)

    tokens = sum(n_tok - 2 for _, n_tok in (new.encode_caption(c, s) for c, s in pairs)) / n
    print(
        f"{n} real long captions, {sum(len(s) for _, s in pairs) / n:.1f} sentences and {tokens:.0f} tokens per caption; "
        f"CPU us per caption, best of {args.repeats}"
    )
    for name, (cold, warm) in results.items():
        print(f"  {name:8s} cold {cold / n * 1e6:7.1f}   warm {warm / n * 1e6:7.1f}")
    (oc, ow), (nc, nw) = results["old"], results["new"]
    print(f"old / new: cold {oc / nc:.2f}x, warm {ow / nw:.2f}x")
    bc, bw = results["batch"]
    print(
        f"new / batch: cold {nc / bc:.2f}x, warm {nw / bw:.2f}x ({sum(p is None for p in plan)} of {n} captions need ftfy)"
    )
    if "hf-full" in results:
        print(
            f"hf-full / new (sentences only for hf-full): cold {results['hf-full'][0] / nc:.2f}x, warm {results['hf-full'][1] / nw:.2f}x"
        )
    # bench_prepare_rate --rows 20000 --mix repeat: each caption once cold, then ~12.3 times warm
    reps = 20000 / n
    print(
        f"as in bench_prepare_rate (20,000 rows, --mix repeat): old {(oc + (reps - 1) * ow) / 20000 * 1e6:.1f}, "
        f"new {(nc + (reps - 1) * nw) / 20000 * 1e6:.1f} us per row"
    )


if __name__ == "__main__":
    main()
