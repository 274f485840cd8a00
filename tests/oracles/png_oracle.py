"""Oracle for tests/test_png.cpp: PIL, which A1111 and most SD tools use to
read and write PNG text chunks, on the same files.

usage:
  png_oracle.py read IN.png OUT.json      # what PIL sees: size, RGB pixels, text chunks
  png_oracle.py write OUT_DIR             # PNGs the way A1111 writes them, in several
                                          # colour modes, plus expected.json
"""
import json
import os
import sys

from PIL import Image
from PIL.PngImagePlugin import PngInfo


def read(path, out):
    im = Image.open(path)
    im.load()
    texts = {k: v for k, v in im.text.items()}
    rgb = im.convert("RGB")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"size": list(rgb.size), "mode": im.mode, "texts": texts,
                   "pixels": list(rgb.tobytes())}, f, ensure_ascii=False)


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    w, h = 9, 6
    base = Image.new("RGBA", (w, h))
    base.putdata([((x * 29) % 256, (y * 41) % 256, (x * y * 7) % 256, (x + y) * 10 % 256)
                  for y in range(h) for x in range(w)])
    # A1111's PngInfo: tEXt when the text encodes as Latin-1, iTXt otherwise.
    info = PngInfo()
    info.add_text("parameters", "café crème, naïve\nNegative prompt: ugly\n"
                                "Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6.5, "
                                "Seed: 123, Size: 512x768, Model: sd15")
    info.add_text("comment", "東京 🙂")
    info.add_text("zipped", "long text " * 500, zip=True)
    expected = {}
    for mode in ("RGB", "RGBA", "L", "LA", "P"):
        im = base.convert(mode) if mode != "P" else base.convert("RGB").quantize(colors=16)
        name = f"pil_{mode}.png"
        im.save(os.path.join(out_dir, name), pnginfo=info)
        expected[name] = {"pixels": list(im.convert("RGB").tobytes()), "size": [w, h],
                          "texts": {k: v for k, v in Image.open(os.path.join(out_dir, name)).text.items()}}
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
