#!/usr/bin/env bash
# The book (docs/book, mdBook): fail when its configuration reference is not what
# `floodgate config-reference` makes of the config structs today, build it, and fail on a broken
# internal link, in the book or in the README (scripts/book-links.py). CI runs it after the
# build; mdbook is installed by .ci/run (`cargo install --locked mdbook`, pinned there).
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK="${MDBOOK:-mdbook}"
if ! command -v "$MDBOOK" >/dev/null 2>&1; then
  MDBOOK="${CARGO_HOME:-$HOME/.cargo}/bin/mdbook"
fi

reference=docs/book/src/reference/configuration.md
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cargo run --quiet --bin floodgate -- config-reference > "$generated"
if ! diff -u "$reference" "$generated"; then
  echo "book: $reference is not current (above: committed, then generated);" \
    "run: cargo run --bin floodgate -- config-reference > $reference" >&2
  exit 1
fi

# mdbook keeps stale pages of removed chapters: build from an empty folder.
rm -rf docs/book/book
"$MDBOOK" build docs/book
python3 scripts/book-links.py docs/book/book README.md
