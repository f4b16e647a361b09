#!/usr/bin/env bash
# Builds the default model's training corpus from freely licensed English text shipped in Debian packages:
#   bible-kjv-text + bible-kjv  King James Bible (text public domain; package GPL-2+), read with `bible`
#   fortunes, fortunes-min      fortune cookies (BSD-licensed collection)
#   dict-devil                  Ambrose Bierce, "The Devil's Dictionary" (public domain)
# Install them first:  apt-get install bible-kjv bible-kjv-text fortunes fortunes-min dict-devil
#
# Output (deterministic; the folder is git-ignored):  OUT_DIR/{train,valid,heldout,heldout_test}.txt, OUT_DIR/SOURCES.txt
# Documents: KJV chapters, single fortunes, Devil's Dictionary paragraphs, in a fixed order (sources as listed,
# fortune files sorted by name). Every 50th document (index % 50 == 49) goes to heldout.txt (test only), index % 50 == 24 to
# valid.txt (checkpoint selection during training), the rest to train.txt; documents are separated by one blank line. Cleaning: UTF-8 only (documents that do not decode
# are dropped), control characters other than tab/newline removed, trailing spaces stripped, runs of blank
# lines collapsed, documents shorter than 20 characters dropped.
set -euo pipefail
OUT_DIR=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/models/corpus"}
mkdir -p "$OUT_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

: > "$OUT_DIR/SOURCES.txt"
for p in bible-kjv bible-kjv-text fortunes fortunes-min dict-devil; do
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) || { echo "make_corpus: package $p is not installed" >&2; exit 1; }
  echo "$p $v" >> "$OUT_DIR/SOURCES.txt"
done

# The whole KJV, one verse per line (-l: no line wrapping).
bible -l 1000000 "gen1:1-rev22:21" > "$tmp/kjv.txt"
zcat /usr/share/dictd/devil.dict.dz > "$tmp/devil.txt"

/usr/bin/python3 - "$tmp" "$OUT_DIR" <<'PY'
import os, re, sys, glob
tmp, out = sys.argv[1], sys.argv[2]

def clean(doc):
    doc = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", doc)
    lines = [l.rstrip() for l in doc.split("\n")]
    doc = "\n".join(lines).strip("\n")
    doc = re.sub(r"\n{3,}", "\n\n", doc)
    return doc

docs = []
# KJV: "Book N" header line, then verses (verse numbers dropped), one chapter per document.
chapter = None
for line in open(os.path.join(tmp, "kjv.txt"), encoding="utf-8"):
    line = line.rstrip("\n")
    m = re.match(r"^\s+\d+ (.*)$", line)
    if m and chapter is not None:
        chapter.append(m.group(1).strip())
    elif line.strip():
        if chapter: docs.append("\n".join(chapter))
        chapter = [line.strip()]
if chapter: docs.append("\n".join(chapter))
n_kjv = len(docs)

# Fortunes: one document per cookie ('%' separator lines); ASCII-art and untranslated files skipped.
skip = {"art", "ascii-art", "translate-me"}
for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
    name = os.path.basename(path)
    if "." in name or name in skip or not os.path.isfile(path): continue
    raw = open(path, "rb").read()
    for cookie in re.split(rb"\n%\n", raw):
        try: docs.append(cookie.decode("utf-8"))
        except UnicodeDecodeError: pass
n_fort = len(docs) - n_kjv

# The Devil's Dictionary: paragraphs (the dictd header lines dropped).
text = open(os.path.join(tmp, "devil.txt"), encoding="utf-8").read()
text = "\n".join(l for l in text.split("\n") if not l.startswith("00-database") and not l.startswith("http://"))
docs += re.split(r"\n\s*\n", text)
n_devil = len(docs) - n_kjv - n_fort

docs = [clean(d) for d in docs]
docs = [d for d in docs if len(d) >= 20]
train = [d for i, d in enumerate(docs) if i % 50 not in (24, 49)]
valid = [d for i, d in enumerate(docs) if i % 50 == 24]
held = [d for i, d in enumerate(docs) if i % 50 == 49]
with open(os.path.join(out, "train.txt"), "w", encoding="utf-8") as f: f.write("\n\n".join(train) + "\n")
with open(os.path.join(out, "valid.txt"), "w", encoding="utf-8") as f: f.write("\n\n".join(valid) + "\n")
with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f: f.write("\n\n".join(held) + "\n")
# The slice the C++ test scores (tests/data/default_model_heldout.txt): the first 3 held-out KJV chapters,
# then held-out fortunes / dictionary paragraphs in order until the slice reaches 24000 characters.
held_idx = [i for i in range(len(docs)) if i % 50 == 49]
kjv_held = [docs[i] for i in held_idx if i < n_kjv][:3]
rest = [docs[i] for i in held_idx if i >= n_kjv]
test = list(kjv_held)
for d in rest:
    if sum(map(len, test)) >= 24000: break
    test.append(d)
with open(os.path.join(out, "heldout_test.txt"), "w", encoding="utf-8") as f: f.write("\n\n".join(test) + "\n")
print(f"make_corpus: {len(docs)} documents (kjv {n_kjv}, fortunes {n_fort}, devil {n_devil} before filtering); "
      f"train {len(train)} docs {sum(map(len, train))} chars, valid {len(valid)} docs, heldout {len(held)} docs {sum(map(len, held))} chars")
PY
( cd "$OUT_DIR" && sha256sum train.txt valid.txt heldout.txt heldout_test.txt >> SOURCES.txt )
cat "$OUT_DIR/SOURCES.txt"
