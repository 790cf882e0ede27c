import sys

if sys.argv[1:2] == ["checkpoints"]:  # `python -m benchmarks checkpoints ...`: checkpoint read / write speed
    from .checkpoints import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["distributed"]:  # `python -m benchmarks distributed ...`: DistributedEngine under mpiexec
    from .distributed import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["distributed-memory"]:  # each rank's peak memory under mpiexec: build, step, save, restore
    from .distributed_memory import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["api"]:  # `python -m benchmarks api ...`: the public API (TPUEmbedding) against the kernels
    from .public_api import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["programs"]:  # `python -m benchmarks programs ...`: whole programs against TF and TorchRec
    from .programs import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["small-step"]:  # `python -m benchmarks small-step ...`: the engine's step, batched or not
    from .small_step import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["runner"]:  # `python -m benchmarks runner ...`: where a MovieLens step's time goes
    from .runner_overhead import main

    sys.exit(main(sys.argv[2:]))

if sys.argv[1:2] == ["memory"]:  # `python -m benchmarks memory ...`: a step's peak RSS against its budget
    from .memory import main

    sys.exit(main(sys.argv[2:]))

from .run import main

sys.exit(main())
