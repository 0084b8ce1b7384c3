from benchmarks.frameworks.cli import main

raise SystemExit(main())
