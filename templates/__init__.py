"""The default theme of InfraLens: Jinja2 templates and static assets, shipped in the package as
`infralens.theme` (pyproject.toml maps this folder there), so an installed wheel builds a site that has
no templates/ of its own. A site's own templates/ overrides these files one by one."""
