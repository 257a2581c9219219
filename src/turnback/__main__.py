from turnback.acp.launch import main

main()
