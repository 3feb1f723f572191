from edgebuild.cli import main

main()
