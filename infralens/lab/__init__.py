"""Lab: pure work on one lab, given its records, its starters' text and its recorded runs.

    resolve      a preview selector and key blocks + a starter's lines → the Excerpt
    calculators  what the parity probe is asked, whether its answers agree, what the page shows
    questions    each practice question with its answer read from the run
    state        what a checked run recorded the excerpt's lines holding, as the page shows it
    notebooks    a Python starter as a Jupyter notebook
    claims       the figures a page states that no run printed
"""
