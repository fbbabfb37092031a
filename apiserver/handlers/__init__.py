"""HTTP handlers of the resource paths, one module per resource; each module's ``router``
function takes the components its routes use."""
