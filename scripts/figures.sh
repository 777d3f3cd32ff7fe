#!/usr/bin/env bash
# Redraws every chapter's figure into docs/figures/<package>.svg and its thumbnail into
# docs/figures/thumbnails/<package>.svg (the committed copies that `cargo test -p golden` compares
# with what the demos draw, and that the README and the book show). Run from anywhere:
#
#     scripts/figures.sh                  # debug builds (chapter 36 trains its model: about half a minute)
#     PROFILE=release scripts/figures.sh  # faster to run, slower to build
#
# The figures are the same bytes in every profile (the golden test compares them in the test profile).
# Chapter 38 needs the pretrained model (LLM_MODEL, or scripts/fetch-model); without it, it is skipped.
#
# Each demo still prints its report on standard output; it is discarded here.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-dev}
mkdir -p docs/figures/thumbnails
for dir in demos/*/; do
  name=$(basename "$dir")
  echo "drawing docs/figures/$name.svg and docs/figures/thumbnails/$name.svg" >&2
  cargo run --quiet --locked --profile "$profile" -p "$name" -- \
    --figure "docs/figures/$name.svg" --thumbnail "docs/figures/thumbnails/$name.svg" >/dev/null
done
# the README's opening strip, built from three of the thumbnails just drawn
echo "drawing docs/figures/hero.svg" >&2
UPDATE_EXPECTED=1 cargo test --quiet --locked -p golden --test hero >/dev/null
