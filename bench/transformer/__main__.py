from bench.transformer.run import main

main()
