# How many tests ran, read from a test tool's output. Sourced by scripts/test.sh and
# scripts/major_steps.sh:
#   tests_ran KIND LOG   prints the number of tests that ran (passed or failed) in LOG, the saved
#                        output of KIND: pg_regress | pytest | cargo
tests_ran() {
  case "$1" in
    # One line per test: "test NAME ... ok" up to PostgreSQL 15, "ok N - NAME" / "not ok N - NAME"
    # from 16 (TAP).
    pg_regress) grep -cE '^(test |(not )?ok [0-9]+ )' "$2" ;;
    # The summary line: "2 passed, 1 failed, 1 error in 3.0s" (errors count as run).
    pytest) tail -5 "$2" | grep -E ' in [0-9.]+s' | grep -oE '[0-9]+ (passed|failed|errors?)' | awk '{n += $1} END {print n + 0}' ;;
    # One "test result: ok. N passed; M failed; ..." line per test binary.
    cargo) grep -E '^test result: ' "$2" | grep -oE '[0-9]+ (passed|failed);' | awk '{n += $1} END {print n + 0}' ;;
    *) echo "tests_ran: unknown kind $1" >&2; return 2 ;;
  esac
}
