#!/bin/sh
# Check the links between the pages: every relative link of README.md,
# docs/*.md and labs/ pages ([text](path) and ![picture](path)) names a file
# that exists, and a link with #anchor names a heading of its page (GitHub's
# anchors: the heading in lower case, punctuation other than - and _ dropped,
# spaces as -). Usage: scripts/check-links.sh PAGE... Exit 1 on a bad link.
set -u
bad=0; links=0
for page in "$@"; do
    dir=$(dirname "$page")
    # one "line<TAB>target" per link outside code blocks and code spans
    targets=$(awk '
        /^```/ { code = !code; next }
        code { next }
        { l = $0; gsub(/`[^`]*`/, "", l)
          while (match(l, /\]\([^) ]+\)/)) {
              t = substr(l, RSTART + 2, RLENGTH - 3); l = substr(l, RSTART + RLENGTH)
              if (t !~ /^(https?|mailto):/) printf "%d\t%s\n", NR, t
          } }' "$page")
    [ -n "$targets" ] || continue
    while IFS='	' read -r line t; do
        links=$((links + 1))
        file=${t%%#*}; anchor=""
        case $t in *"#"*) anchor=${t#*#} ;; esac
        case $file in
            "") target=$page ;;
            /*) target=$file ;;
            *) target=$dir/$file ;;
        esac
        if [ ! -e "$target" ]; then
            echo "$page line $line: $t: no such file"; bad=$((bad + 1)); continue
        fi
        [ -n "$anchor" ] || continue
        case $target in *.md) ;; *) continue ;; esac
        if ! awk -v want="$anchor" '
            /^```/ { code = !code; next }
            !code && /^#+ / { h = $0; sub(/^#+ /, "", h); h = tolower(h)
                gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
                if (h == want) found = 1 }
            END { exit !found }' "$target"; then
            echo "$page line $line: $t: no heading #$anchor in $target"; bad=$((bad + 1))
        fi
    done <<EOT
$targets
EOT
done
echo "check-links: $links links, $bad broken"
[ "$bad" -eq 0 ]
