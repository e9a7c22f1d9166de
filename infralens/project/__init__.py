"""Project: the disk. Nothing else in the package reads the project or writes output/.

    workspace  reads site.yml, manifests, starters and the theme behind its size and symlink
               guards; keeps the caches in one folder (--cache-dir)
    commit     stages files beside output/ and moves them in under a journal
"""
