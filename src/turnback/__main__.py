from turnback.launcher import main

main()
