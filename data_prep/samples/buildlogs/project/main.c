#include <stdio.h>

int divide(int a, int b);

int main(void) {
    printf("%d\n", divide(6, 3));
    return 0;
}
