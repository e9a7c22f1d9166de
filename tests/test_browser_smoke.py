def test_smoke(open_tab):
    tab = open_tab()
    page = tab.goto("index.html")
    assert page.title()
    assert tab.errors == [] and tab.external == []
