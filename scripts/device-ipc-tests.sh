# The "ipc-tests" and "ipc-python" sub-steps of the ipc step (scripts/device-ipc.sh), also a step of
# their own, FABRIC_LIB_DEVICE_STEPS=ipctests (sourced by scripts/device-test.sh after its build;
# uses its $root, $build, $out, $py, gtest_step, stamp and result): the ipc domain's and the
# copy engine's device tests and the torch test, without the benchmarks (about 2 minutes).
gtest_step ipc-tests 'Ipc/*:CopyEngine*' 300

t0=$(date +%s)
stamp "ipc python (torch tensors between processes)"
echo "== pytest tests/device/ipc_python" >>"$out/device-tests.log"
(cd "$out" && PYTHONPATH="$build/python" timeout 240 "$py" -m pytest -v -s -rA -p no:cacheprovider \
  -o faulthandler_timeout=200 "$root/tests/device/ipc_python") >>"$out/device-tests.log" 2>&1
status=$?
result ipc-python "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
