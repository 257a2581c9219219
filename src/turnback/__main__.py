from turnback.cli import main

main()
