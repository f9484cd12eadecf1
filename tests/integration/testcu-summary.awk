# Summarise a verbose iscsi-test-cu log: one line per test, "passed|skipped|failed SUITE.TEST".
#   awk -f testcu-summary.awk LOG
# CUnit prints "  Test: NAME ..." then the test's own output, then the verdict ("passed" or
# "FAILED") at the start of a line or right after the "...". A test counts as skipped when it
# passed but printed [SKIPPED] before its verdict (libiscsi's way of saying the target lacks
# the feature); text after the verdict on the same line comes from the test's teardown and does
# not change it. A test with no verdict (crash, timeout) failed.
function take(line, first) {
    if (end != "")
        return
    if (match(line, /^[ \t]*(passed|FAILED)/)) {
        end = (line ~ /^[ \t]*passed/) ? "passed" : "failed"
        return
    }
    text = text "\n" line
    sub(/[ \t\r]+$/, "", line)
    if (line ~ /passed$/)
        end = "passed"
    else if (line ~ /FAILED$/)
        end = "failed"
}
function flush(st) {
    if (name == "")
        return
    st = (end == "") ? "failed" : end
    if (st == "passed" && index(text, "[SKIPPED]"))
        st = "skipped"
    print st, name
    name = ""
}
/^Suite: / { flush(); suite = $2; next }
/^Run Summary:/ { flush(); next }
/^[ \t]+Test: [^ \t]+ \.\.\./ {
    flush()
    name = suite "." $2
    rest = $0
    sub(/^[ \t]+Test: [^ \t]+ \.\.\./, "", rest)
    text = ""
    end = ""
    take(rest)
    next
}
name != "" { take($0) }
END { flush() }
