from sgdask.cli import main

main()
