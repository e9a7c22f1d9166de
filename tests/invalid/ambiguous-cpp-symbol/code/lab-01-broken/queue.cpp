struct Queue {
  bool push(int x) { return x > 0; }
  bool push(int x, int times) { return x > times; }
};

int main() { return Queue{}.push(1) ? 0 : 1; }
