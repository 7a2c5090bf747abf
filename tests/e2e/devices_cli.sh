#!/usr/bin/env bash
# moetier devices / --list-devices: the Vulkan devices, or one line saying there are none or
# that the build has no Vulkan; never an error for a machine without a device.
source "$(dirname "$0")/common.bash"

"$MOETIER" devices > "$WORK/devices.txt" 2> "$WORK/err"
rc=$?
[ "$rc" -eq 0 ] || fail "devices: exit $rc: $(cat "$WORK/err")"
"$MOETIER" --list-devices > "$WORK/list.txt" 2>&1 || fail "--list-devices failed: $(cat "$WORK/list.txt")"
cmp -s "$WORK/devices.txt" "$WORK/list.txt" && pass "--list-devices is devices" ||
  fail "--list-devices differs: $(cat "$WORK/list.txt")"

if grep -q "this build has no Vulkan" "$WORK/devices.txt"; then
  [ "$(wc -l < "$WORK/devices.txt")" -eq 1 ] && pass "a build without Vulkan says so in one line" ||
    fail "no-Vulkan output: $(cat "$WORK/devices.txt")"
  finish
  exit 0
fi

# A Vulkan build: each device on a line of its own; lavapipe, where installed, among them.
if grep -q "^Vulkan devices:" "$WORK/devices.txt"; then
  grep -Eq "^  vulkan:0  .+ \((discrete|integrated|virtual|cpu|other); .*device-local\)$" \
    "$WORK/devices.txt" && pass "devices: $(sed -n 2p "$WORK/devices.txt")" ||
    fail "devices lines: $(cat "$WORK/devices.txt")"
elif ! grep -qx "no Vulkan device found" "$WORK/devices.txt"; then
  fail "devices output: $(cat "$WORK/devices.txt")"
fi
if ls /usr/share/vulkan/icd.d/lvp_icd*.json > /dev/null 2>&1; then
  grep -q "llvmpipe" "$WORK/devices.txt" && pass "lavapipe is listed" ||
    fail "lavapipe is installed but not listed: $(cat "$WORK/devices.txt")"
fi

# No driver at all: one line on stdout, exit 0, no crash.
VK_ICD_FILENAMES="$WORK/no_such_icd.json" VK_DRIVER_FILES="$WORK/no_such_icd.json" \
  "$MOETIER" devices > "$WORK/none.txt" 2> "$WORK/none_err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(cat "$WORK/none.txt")" = "no Vulkan device found" ] &&
  pass "no Vulkan driver: 'no Vulkan device found'" ||
  fail "no driver: exit $rc: $(cat "$WORK/none.txt" "$WORK/none_err")"
finish
