// model layer
