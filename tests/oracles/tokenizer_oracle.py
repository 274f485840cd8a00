"""Oracle for tests/test_clip_tokenizer.cpp: transformers' CLIPTokenizer (the
slow one that diffusers loads, 4.47, ftfy absent) on the same files the C++
tokenizer reads.

usage:
  tokenizer_oracle.py encode DIR PROMPTS.json OUT.json [LAYOUT]
                                               # ids / tokens / counts / decoded text per prompt;
                                               # with LAYOUT, first train a small CLIP-format BPE
                                               # and write the tokenizer folder DIR:
                                               #   sd1     SD1.x files (pad <|endoftext|>)
                                               #   sd2     SD2.x files (pad "!", id 0)
                                               #   decoder added_tokens_decoder layout with an
                                               #           extra token and model_max_length 24
  tokenizer_oracle.py codepoints OUT.json      # the cleanup + regex split of short strings
                                               # built around (nearly) every code point

Nothing is downloaded: the vocabulary is learned from a corpus generated here.
"""
import json
import os
import random
import sys
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from transformers import CLIPTokenizer  # noqa: E402
from transformers.models.clip.tokenization_clip import bytes_to_unicode  # noqa: E402

PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""

WORDS = """a an the of in on with and photo portrait painting landscape astronaut riding horse mars castle
masterpiece best quality ultra detailed highly intricate lighting cinematic sharp focus bokeh studio
woman man girl boy cat dog dragon forest mountain river ocean sunset night city street neon rain
red green blue yellow purple orange black white golden silver colorful vibrant pastel dark bright
style art artstation trending octane render unreal engine digital oil canvas watercolor sketch anime
photorealistic realistic hyperrealistic concept illustration fantasy scifi cyberpunk steampunk
bad hands blurry lowres worst jpeg artifacts extra fingers deformed ugly watermark signature text
don't it's we'll i'd you're they've i'm cat's dog's
café naïve résumé müller ångström straße ελληνικά οδος istanbul
東京 日本語 中文 한국어 タワー
""".split()


def make_corpus(seed=1234, lines=4000):
    rng = random.Random(seed)
    syll = ["ka", "ri", "to", "mo", "sen", "lu", "vi", "qua", "zor", "ph", "th", "ing", "tion", "er"]
    extra = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    vocab = WORDS + extra
    out = []
    for _ in range(lines):
        n = rng.randint(3, 14)
        ws = []
        for _ in range(n):
            r = rng.random()
            if r < 0.08:
                ws.append(str(rng.randint(0, 4096)))
            elif r < 0.12:
                ws.append(rng.choice(["(", "((", "[", ":1.2)", "),", "!!", "...", "--", "🙂", "👍🏽", "❤️"]))
            else:
                ws.append(rng.choice(vocab))
        out.append(" ".join(ws).lower())
    return out


def train_merges(corpus, vocab_size=2600):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(PATTERN), "isolated"),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, end_of_word_suffix="</w>", min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return [tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]]


def added(content, special=True, lstrip=False, rstrip=False):
    return {"content": content, "lstrip": lstrip, "normalized": True, "rstrip": rstrip,
            "single_word": False, "special": special}


def write_vocab(out, layout):
    merges = train_merges(make_corpus())
    base = list(bytes_to_unicode().values())
    tokens = base + [b + "</w>" for b in base] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(tokens)) == len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")

    def obj(content):  # the AddedToken objects SD1.x/SD2.x files hold
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True,
                "rstrip": False, "single_word": False}

    if layout in ("sd1", "sd2"):
        pad = "<|endoftext|>" if layout == "sd1" else "!"
        cfg = {"add_prefix_space": False, "bos_token": obj("<|startoftext|>"), "do_lower_case": True,
               "eos_token": obj("<|endoftext|>"), "errors": "replace", "model_max_length": 77,
               "name_or_path": "openai/clip-vit-large-patch14", "pad_token": pad,
               "special_tokens_map_file": "./special_tokens_map.json", "tokenizer_class": "CLIPTokenizer",
               "unk_token": obj("<|endoftext|>")}
        stm = {k: ({kk: vv for kk, vv in v.items() if kk != "__type"} if isinstance(v, dict) else v)
               for k, v in cfg.items() if k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
            json.dump(stm, f, indent=2)
    elif layout == "decoder":
        n = len(vocab)
        cfg = {"added_tokens_decoder": {
                   str(n - 2): added("<|startoftext|>"), str(n - 1): added("<|endoftext|>"),
                   str(n): added("<nanscope-style>", special=False, lstrip=True, rstrip=True)},
               "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
               "pad_token": "<|endoftext|>", "model_max_length": 24, "tokenizer_class": "CLIPTokenizer"}
    else:
        sys.exit(f"unknown layout {layout}")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def encode(folder, prompts_path, out_path):
    tok = CLIPTokenizer.from_pretrained(folder)
    if tok.fix_text is not None:
        sys.exit("ftfy is installed in this python: the oracle describes the path without it")
    with open(prompts_path, encoding="utf-8") as f:
        prompts = json.load(f)
    results = []
    for p in prompts:
        # exactly what diffusers' StableDiffusionPipeline.encode_prompt calls
        ids = tok(p, padding="max_length", max_length=tok.model_max_length, truncation=True).input_ids
        full = tok(p, add_special_tokens=False).input_ids
        results.append({"ids": ids, "tokens": tok.tokenize(p), "count": len(full),
                        "decoded": tok.convert_tokens_to_string(tok.convert_ids_to_tokens(full))})
    info = {"bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id,
            "max_length": tok.model_max_length, "vocab_size": len(tok), "results": results}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(info, f, ensure_ascii=False)


def sampled(cp):
    # CJK ideographs and Hangul syllables behave alike within their blocks: every 16th.
    uniform = (0x3400 <= cp <= 0x4DBF or 0x4E00 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7A3
               or 0x20000 <= cp <= 0x323AF)
    return not uniform or cp % 16 == 0


def codepoints(out_path):
    import regex
    from transformers.models.clip.tokenization_clip import BasicTokenizer

    # what CLIPTokenizer.__init__ builds and _tokenize runs when ftfy is absent
    nlp = BasicTokenizer(strip_accents=False, do_split_on_punc=False)
    pat = regex.compile(PATTERN, regex.IGNORECASE)
    entries = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        cat = unicodedata.category(chr(cp))
        if cat == "Cn" or (cat == "Co" and cp > 0xFFFF) or not sampled(cp):
            continue
        c = chr(cp)
        # letter/number/other class and lower-casing (a?a), Final_Sigma after (ΑΣ?) and before (?Σ)
        entries.append((cp, f"a{c}a \u0391\u03a3{c} {c}\u03a3 X{c}"))
    sep = " <|endoftext|> "
    text = " ".join(nlp.tokenize(sep.join(e for _, e in entries)))
    pieces = pat.findall(text)
    groups = [[]]
    for p in pieces:
        if p == "<|endoftext|>":
            groups.append([])
        else:
            groups[-1].append(p)
    assert len(groups) == len(entries), (len(groups), len(entries))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"unidata_version": unicodedata.unidata_version,
                   "entries": [[cp, e, g] for (cp, e), g in zip(entries, groups)]}, f, ensure_ascii=False)


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "encode" and len(sys.argv) in (5, 6):
        if len(sys.argv) == 6:
            write_vocab(sys.argv[2], sys.argv[5])
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "codepoints" and len(sys.argv) == 3:
        codepoints(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
