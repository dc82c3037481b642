#!/usr/bin/env bash
# Regenerate every audio fixture from text/lines.tsv.
#
#   bash audio-fixtures/make.sh
#
# Needs espeak-ng and sox. Output is deterministic: running it twice gives
# byte-identical files (sox runs with -D, so no dither noise is added).
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

for tool in espeak-ng sox soxi; do
    command -v "$tool" >/dev/null || { echo "make.sh: $tool not found" >&2; exit 1; }
done

RATE=16000
FRAME=$(( RATE / 50 ))   # samples in one 20 ms frame; every clip is a whole number of frames
# Per-role espeak-ng arguments: voice[+variant], pitch (0-99), speed (wpm).
declare -A VOICE=(
    [caller]="-v en-us -p 50 -s 175"
    [advisor]="-v en-gb+f3 -p 60 -s 185"
    [specialist]="-v en-us+m3 -p 25 -s 170"
    # agent sets (one voice per agent; the set's agents must sound distinct)
    [asha]="-v en-gb+f3 -p 60 -s 185"
    [ravi]="-v en-us+m3 -p 25 -s 170"
    [bill]="-v en-us+m1 -p 40 -s 180"
    [priya]="-v en-gb+f4 -p 70 -s 190"
    [sam]="-v en-gb-scotland+m7 -p 35 -s 165"
    [quinn]="-v en-us+f2 -p 55 -s 185"
    [sofia]="-v en-gb-x-rp+f5 -p 65 -s 175"
    [felix]="-v en-029+m4 -p 30 -s 170"
    [gina]="-v en-gb+f2 -p 58 -s 180"
    [victor]="-v en-us+m2 -p 30 -s 170"
)

# Conversation timing in ms; keep these multiples of 20 ms so that every
# position in the timeline falls on a frame boundary.
LEAD_MS=500         # silence before the first caller turn
EOS_MS=500          # model's end-of-speech silence window
LATENCY_MS=600      # allowance for model latency
PAUSE_MS=1200       # pause after a reply before the caller speaks again
TRAIL_MS=1000       # silence after the last reply's expected end
HANDOFF_MS=800      # agent-set conversations: slack per handoff follow-up, for a slow handoff

clips=clips
bad=bad
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$clips" "$bad" "$tmp/clips"
rm -f "$clips"/*.wav "$clips"/timeline.txt "$bad"/*.wav
rm -f "$clips"/seed*/*.wav "$clips"/seed*/timeline.txt

# sox output options: 16 kHz, mono, 16-bit signed PCM WAV.
out_fmt=(-r "$RATE" -c 1 -b 16 -e signed-integer -t wav)

# --- 1. one clip per line of text/lines.tsv --------------------------------
while IFS=$'\t' read -r id role text; do
    [[ -z "$id" || "$id" == \#* ]] && continue
    [[ -n "${VOICE[$role]:-}" ]] || { echo "make.sh: unknown role '$role' for $id" >&2; exit 1; }
    mkdir -p "$(dirname "$tmp/$id")"
    printf '%s\n' "$text" > "$tmp/$id.txt"
    # shellcheck disable=SC2086  # VOICE entries are deliberately word-split
    espeak-ng ${VOICE[$role]} -f "$tmp/$id.txt" -w "$tmp/$id.raw.wav"
    # resample, trim silence at both ends, pad 50 ms of zeros each side,
    # normalise peak to -3 dBFS.
    sox -D -V1 "$tmp/$id.raw.wav" "${out_fmt[@]}" "$tmp/$id.wav" \
        rate -v "$RATE" \
        silence 1 0.005 0.1% reverse silence 1 0.005 0.1% reverse \
        pad 0.05 0.05 \
        gain -n -3
    # extend the trailing zeros to a whole number of 20 ms frames; the agent sets'
    # caller turns only go into their conversation file
    dest=$clips
    [[ "$id" == */caller_* ]] && dest="$tmp/clips"
    mkdir -p "$(dirname "$dest/$id.wav")"
    len=$(soxi -s "$tmp/$id.wav")
    sox -D -V1 "$tmp/$id.wav" "${out_fmt[@]}" "$dest/$id.wav" \
        pad 0 "$(( (FRAME - len % FRAME) % FRAME ))s"
done < text/lines.tsv

# --- 2. caller_conversation.wav --------------------------------------------
samples() { soxi -s "$1"; }
sec() { awk -v s="$1" -v r="$RATE" 'BEGIN { printf "%.3f", s / r }'; }
silence() {  # silence <samples> <out>
    sox -D -V1 -r "$RATE" -c 1 -n "${out_fmt[@]}" "$2" trim 0 "$1s"
}

turns=()
for f in "$clips"/caller_[0-9][0-9].wav; do turns+=("$(basename "$f" .wav | cut -d_ -f2)"); done
reply_for() {  # the reply clip answering caller turn $1
    local m=("$clips"/advisor_"$1".wav "$clips"/specialist_"$1".wav) f
    for f in "${m[@]}"; do [[ -e "$f" ]] && { echo "$f"; return; }; done
    echo "make.sh: no reply clip for caller turn $1" >&2; exit 1
}

per_ms=$(( RATE / 1000 ))
parts=()
silence $(( LEAD_MS * per_ms )) "$tmp/lead.wav"
parts+=("$tmp/lead.wav")
pos=$(( LEAD_MS * per_ms ))
n=${#turns[@]}
rows=()
for i in "${!turns[@]}"; do
    t=${turns[$i]}
    c="$clips/caller_$t.wav"
    r=$(reply_for "$t")
    c_len=$(samples "$c")
    r_len=$(samples "$r")
    c_start=$pos
    c_end=$(( pos + c_len ))
    r_start=$(( c_end + (EOS_MS + LATENCY_MS) * per_ms ))
    r_end=$(( r_start + r_len ))
    if (( i + 1 < n )); then tail_ms=$PAUSE_MS; else tail_ms=$TRAIL_MS; fi
    gap=$(( r_end + tail_ms * per_ms - c_end ))
    silence "$gap" "$tmp/gap_$t.wav"
    parts+=("$c" "$tmp/gap_$t.wav")
    pos=$(( c_end + gap ))
    rows+=("$(printf '%-6s %-10s %9s %9s  %-20s %9s %9s' \
        "$t" "caller_$t" "$(sec $c_start)" "$(sec $c_end)" \
        "$(basename "$r")" "$(sec $r_start)" "$(sec $r_end)")")
done
sox -D -V1 "${parts[@]}" "${out_fmt[@]}" "$clips/caller_conversation.wav"

{
    echo "# caller_conversation.wav timeline (seconds from start of file, ${RATE} Hz)"
    echo "# reply start = caller end + ${EOS_MS} ms end-of-speech window + ${LATENCY_MS} ms latency allowance"
    echo "# next caller turn = reply end + ${PAUSE_MS} ms; file ends ${TRAIL_MS} ms after the last reply end"
    printf '%-6s %-10s %9s %9s  %-20s %9s %9s\n' \
        turn caller start end reply exp_start exp_end
    printf '%s\n' "${rows[@]}"
    echo "# total $(sec "$pos") s ($pos samples)"
} > "$clips/timeline.txt"

# --- 2b. the agent sets' conversations (text/conversations.tsv) -----------
# One caller_conversation.wav and timeline.txt per set. After each caller turn
# comes its answer; when the answer announces a handoff, the new agent's
# follow-up is expected right after it (gapless), with HANDOFF_MS of slack.
clip_of() {  # the WAV of a line id (agent clips are kept, caller turns are not)
    if [[ -e "$clips/$1.wav" ]]; then echo "$clips/$1.wav"; else echo "$tmp/clips/$1.wav"; fi
}
sets=()
while IFS=$'\t' read -r set _ _; do
    [[ -z "$set" || "$set" == \#* ]] && continue
    [[ " ${sets[*]} " == *" $set "* ]] || sets+=("$set")
done < text/conversations.tsv
for set in "${sets[@]}"; do
    silence $(( LEAD_MS * per_ms )) "$tmp/$set.lead.wav"
    parts=("$tmp/$set.lead.wav")
    pos=$(( LEAD_MS * per_ms ))
    rows=()
    mapfile -t lines < <(awk -F'\t' -v s="$set" '$1 == s' text/conversations.tsv)
    n=${#lines[@]}
    for i in "${!lines[@]}"; do
        IFS=$'\t' read -r _ caller replies <<< "${lines[$i]}"
        c=$(clip_of "$caller")
        [[ -e "$c" ]] || { echo "make.sh: $set: no clip $caller" >&2; exit 1; }
        c_start=$pos
        c_end=$(( pos + $(samples "$c") ))
        r_start=$(( c_end + (EOS_MS + LATENCY_MS) * per_ms ))
        slack=0
        IFS=, read -r -a rs <<< "$replies"
        for k in "${!rs[@]}"; do
            r=$(clip_of "${rs[$k]}")
            [[ -e "$r" ]] || { echo "make.sh: $set: no clip ${rs[$k]}" >&2; exit 1; }
            r_end=$(( r_start + $(samples "$r") ))
            if (( k == 0 )); then
                rows+=("$(printf '%-6s %-18s %9s %9s  %-26s %9s %9s' "$(( i + 1 ))" \
                    "$(basename "$caller")" "$(sec $c_start)" "$(sec $c_end)" \
                    "$(basename "$r")" "$(sec $r_start)" "$(sec $r_end)")")
            else
                slack=$(( slack + HANDOFF_MS * per_ms ))
                rows+=("$(printf '%-6s %-18s %9s %9s  %-26s %9s %9s' "" "(handoff)" "" "" \
                    "$(basename "$r")" "$(sec $r_start)" "$(sec $r_end)")")
            fi
            r_start=$r_end
        done
        if (( i + 1 < n )); then tail_ms=$PAUSE_MS; else tail_ms=$TRAIL_MS; fi
        gap=$(( r_end + slack + tail_ms * per_ms - c_end ))
        silence "$gap" "$tmp/$set.gap_$i.wav"
        parts+=("$c" "$tmp/$set.gap_$i.wav")
        pos=$(( c_end + gap ))
    done
    mkdir -p "$clips/$set"
    sox -D -V1 "${parts[@]}" "${out_fmt[@]}" "$clips/$set/caller_conversation.wav"
    {
        echo "# $set/caller_conversation.wav timeline (seconds from start of file, ${RATE} Hz)"
        echo "# reply start = caller end + ${EOS_MS} ms end-of-speech window + ${LATENCY_MS} ms latency allowance"
        echo "# a (handoff) row is the new agent's follow-up, expected right after the announcement;"
        echo "# each adds ${HANDOFF_MS} ms of slack before the caller speaks again"
        echo "# next caller turn = last reply end + slack + ${PAUSE_MS} ms; file ends ${TRAIL_MS} ms after the last reply end"
        printf '%-6s %-18s %9s %9s  %-26s %9s %9s\n' \
            turn caller start end reply exp_start exp_end
        printf '%s\n' "${rows[@]}"
        echo "# total $(sec "$pos") s ($pos samples)"
    } > "$clips/$set/timeline.txt"
done

# --- 3. deliberately broken files for error tests --------------------------
le16() { printf "\\x$(printf %02x $(( $1 & 255 )))\\x$(printf %02x $(( ($1 >> 8) & 255 )))"; }
le32() { le16 $(( $1 & 65535 )); le16 $(( ($1 >> 16) & 65535 )); }
{
    # Well-formed RIFF/WAVE header (16 kHz mono 16-bit PCM) whose data chunk
    # claims 1 s of audio (32000 bytes); only 320 bytes (10 ms) follow.
    printf 'RIFF'; le32 $(( 36 + 32000 )); printf 'WAVE'
    printf 'fmt '; le32 16; le16 1; le16 1; le32 "$RATE"; le32 $(( RATE * 2 )); le16 2; le16 16
    printf 'data'; le32 32000
    head -c 320 /dev/zero
} > "$bad/corrupt.wav"
printf 'This is not a WAV file. It is plain text with a .wav name,\nused to test that WAV loading fails cleanly.\n' \
    > "$bad/not_a_wav.wav"

# --- report ----------------------------------------------------------------
cat "$clips/timeline.txt" "$clips"/seed*/timeline.txt
echo
for f in "$clips"/*.wav "$clips"/seed*/*.wav; do
    printf '%-40s %7s s\n' "$f" "$(sec "$(samples "$f")")"
done
