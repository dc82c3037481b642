#!/usr/bin/env bash
# Regenerate the answered-leg openings listed in labels.tsv: 8 kHz mono 16-bit WAVs of 5 s, the
# phone leg's rate, each with a faint line-noise floor (-60 dBFS) so silence is not digital zero.
#
#   bash audio-fixtures/answering/make.sh
#
# Needs espeak-ng and sox. Deterministic (sox -R, no dither).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
for tool in espeak-ng sox; do
    command -v "$tool" >/dev/null || { echo "make.sh: $tool not found" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -f ./*.wav
fmt=(-r 8000 -c 1 -b 16 -e signed-integer)
LEN=5
VOICE=(-v en-gb+f4 -p 70 -s 175)

say() { # text out.wav: speech trimmed, peak at -6 dBFS, 0.3 s lead-in
    espeak-ng "${VOICE[@]}" -w "$tmp/raw.wav" "$1"
    sox -R -D "$tmp/raw.wav" "${fmt[@]}" "$2" silence 1 0.01 0.1% reverse silence 1 0.01 0.1% reverse \
        norm -6 pad 0.3 0
}
beep() { sox -R -D -n "${fmt[@]}" "$1" synth 0.5 sine 1000 vol 0.4 pad 0.4 0; }
finish() { # in.wav out.wav: pad or cut to LEN s, add the noise floor
    sox -R -D "$1" "${fmt[@]}" "$tmp/body.wav" pad 0 "$LEN" trim 0 "$LEN"
    sox -R -D -n "${fmt[@]}" "$tmp/noise.wav" synth "$LEN" whitenoise vol 0.001
    sox -R -D -m "$tmp/body.wav" "$tmp/noise.wav" "${fmt[@]}" "$2"
}

while IFS=$'\t' read -r id label kind text; do
    [[ -z "$id" || "$id" == \#* ]] && continue
    case "$kind" in
        say) say "$text" "$tmp/a.wav" ;;
        say2) say "${text%%|*}" "$tmp/s1.wav"; say "${text##*|}" "$tmp/s2.wav"
              sox -R -D -n "${fmt[@]}" "$tmp/gap.wav" trim 0 1.2
              sox -D "$tmp/s1.wav" "$tmp/gap.wav" "$tmp/s2.wav" "$tmp/a.wav" ;;
        saybeep) say "$text" "$tmp/s1.wav"; beep "$tmp/b.wav"; sox -D "$tmp/s1.wav" "$tmp/b.wav" "$tmp/a.wav" ;;
        music) notes=()
               for n in C4 E4 G4 C5 G4 E4 C4 G3 C4 E4 G4 C5; do
                   sox -R -D -n "${fmt[@]}" "$tmp/n$n${#notes[@]}.wav" synth 0.4 pluck "$n" vol 0.5
                   notes+=("$tmp/n$n${#notes[@]}.wav")
               done
               sox -D "${notes[@]}" "$tmp/a.wav" pad 0.3 0 ;;
        silence) sox -R -D -n "${fmt[@]}" "$tmp/a.wav" trim 0 0.1 ;;
        *) echo "make.sh: $id: unknown kind $kind" >&2; exit 1 ;;
    esac
    finish "$tmp/a.wav" "$id.wav"
    printf '%-14s %-8s %s\n' "$id" "$label" "$(sox --i -D "$tmp/a.wav")"
done < labels.tsv
