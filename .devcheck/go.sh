set -x
source .gpu/activate.sh
export PYTHONPATH=$PWD:$PYTHONPATH
python -m nvscope doctor > $OUT/doctor.txt 2>&1; echo "rc=$?" >> $OUT/doctor.txt
python -m nvscope doctor --require-gpu-stack > $OUT/doctor_gpu.txt 2>&1; echo "rc=$?" >> $OUT/doctor_gpu.txt
python -m nvscope options > $OUT/options.txt 2>&1
python -m nvscope run .devcheck/mm.py --x > $OUT/run_plain.txt 2>&1; echo "rc=$?" >> $OUT/run_plain.txt
python -m nvscope run --enable fuse_matmul --disable matmul_expr_eval .devcheck/mm.py --x > $OUT/run.txt 2>&1; echo "rc=$?" >> $OUT/run.txt
python -m pytest -p nvscope.pytest_plugin .devcheck/test_gpu_plugin.py -v -s -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
python -m pytest -p nvscope.pytest_plugin .devcheck/test_gpu_plugin.py -v -s -p no:cacheprovider --nv-enable kernel_profile > $OUT/pytest_cli.txt 2>&1; echo "rc=$?" >> $OUT/pytest_cli.txt
NVSCOPE_GPU_THUNDER=next source .gpu/activate.sh
python -m nvscope run --enable fuse_matmul --disable matmul_expr_eval .devcheck/mm.py > $OUT/run_next.txt 2>&1; echo "rc=$?" >> $OUT/run_next.txt
