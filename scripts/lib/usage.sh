# Sourced first by every program in scripts/ (shellcheck: sourced, no shebang):
# `--help` or `-h` as the first argument prints the script's header comment —
# what it does, its arguments and environment — and exits 0, before anything
# is installed, built or started.
case "${1:-}" in
  -h | --help)
    echo "$(basename "$0"):"
    awk 'NR == 1 && /^#!/ { next } /^#/ { sub(/^# ?/, ""); print "  " $0; next } { exit }' "$0"
    exit 0
    ;;
esac
