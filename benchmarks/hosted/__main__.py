from benchmarks.hosted.cli import main

raise SystemExit(main())
