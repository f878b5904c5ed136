// A source folder that cmake/check_layers.cmake does not list: the check refuses it.
int newsource() { return 0; }
