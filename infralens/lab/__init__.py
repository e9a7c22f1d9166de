"""Lab: pure work on one lab, given its records, its starters' text and its recorded runs.

    resolve      a preview selector and key blocks + a starter's lines → the Excerpt
    features     the page features, listed once, and the three functions each has
    state        (a feature) what a checked run recorded the excerpt's lines holding, as shown
    calculators  (a feature) what the parity probe is asked, whether its answers agree, the view
    questions    (a feature) each practice question with its answer read from the run
    notebooks    (a feature) a Python starter as a Jupyter notebook
    shown        numbers and arithmetic as a calculator shows them
    roofline     the roofline picture of a calculator
    claims       the figures a page states that no run printed
"""
