// Linked with one layer's whole archive and nothing but what that layer links (tests/CMakeLists.txt,
// lpemu_layer_<layer>): any call from the layer into a layer above it is an undefined symbol.
int main() { return 0; }
