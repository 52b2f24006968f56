set -u
O=$OUT
for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; done
export ESPER_CUBLAS_LIB=/usr/local/cuda/lib64/libcublas.so.13 ESPER_GPU_BUNDLE=1
timeout 60 gpu/kernels_cuda.test -test.v -test.count=1 -test.run 'TestTrainerCapturedStepHoldsMemory|TestConformance' > $O/tests.log 2>&1; echo "tests rc=$?"
grep -E "^(--- |ok|FAIL|PASS)|trainer_replay" $O/tests.log | grep -v -- "--- PASS: TestConformance/" | tail -8
ESPER_CPUPROFILE=$O/w4.prof timeout 60 gpu/esper bench --device cuda --workload W4 --json $O > $O/w4.log 2>&1; echo "w4 rc=$?"; tail -7 $O/w4.log
ESPER_CPUPROFILE=$O/w1.prof timeout 60 gpu/esper bench --device cuda --workload W1 --json $O > $O/w1.log 2>&1; echo "w1 rc=$?"; tail -12 $O/w1.log
ESPER_CPUPROFILE=$O/w2.prof timeout 60 gpu/esper bench --device cuda --workload W2 --json $O > $O/w2.log 2>&1; echo "w2 rc=$?"; grep -E "p95|esper|nodes" $O/w2.log | tail -8
timeout 60 gpu/esper bench --device cuda --workload W5 --json $O > $O/w5.log 2>&1; echo "w5 rc=$?"; tail -14 $O/w5.log
