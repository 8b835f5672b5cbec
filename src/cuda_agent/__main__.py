from cuda_agent.cli import main

main()
